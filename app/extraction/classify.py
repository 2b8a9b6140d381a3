"""Which kind of memory a sentence is, by weighted cue words, or none at all.

Each kind has cue patterns with weights (a hand-set, log-odds-like lexicon); the kind with
the highest total of at least MIN_SCORE wins, ties broken by KIND_PRIORITY. Without a cue,
a statement that says something concrete (numbers, names, enough content words, a "X is Y")
is a fact. Greetings, thanks, acknowledgements, meta-chat and questions are skipped; a
question survives only as a request to remember or remind ("can you remind me to …?").
"""

from __future__ import annotations

import re

from app.extraction.smalltalk import is_request_to_remember, is_small_talk_sentence, stem
from app.extraction.vocabulary import STOPWORDS, word_set

MIN_SCORE = 2.0
KIND_PRIORITY = ("decision", "todo", "preference", "goal", "event", "code", "fact")

_I = re.IGNORECASE
_ADV = r"(?:(?:really|also|still|now|just|actually|definitely|much|strongly|always|usually)\s+)?"
_DAYS = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
# (kind, weight, pattern); "'" in a pattern also matches the typographic apostrophe.
_CUE_TABLE: tuple[tuple[str, float, str], ...] = (
    ("decision", 3.0, r"\b(?:we|i|they|team|everyone)\s+(?:have\s+|'ve\s+|just\s+)?"
                      r"(?:decided|agreed|settled|chose|picked|opted)\b"),
    ("decision", 2.5, r"\b(?:decided|agreed)\s+(?:to|on|that|upon)\b"),
    ("decision", 3.0, r"\b(?:will|'ll|are going to|gonna)\s+go\s+with\b"),
    ("decision", 2.5, r"\blet'?s\s+(?:go with|use|pick|choose|stick with|switch to)\b"),
    ("decision", 1.5, r"\b(?:decision|final call|settled on|going with|we'll use|we will use"
                      r"|the plan is)\b"),
    ("preference", 3.0, r"\b(?:i|you|we|he|she|they)\s+" + _ADV +
                        r"(?:prefer|like|love|hate|dislike|enjoy|adore|detest)\b"),
    ("preference", 3.0, r"\b(?:i'd|i would|we'd|we would)\s+(?:much\s+)?rather\b"),
    ("preference", 2.5, r"\b(?:can't|cannot|don't|do not)\s+(?:stand|like|enjoy)\b"),
    ("preference", 2.0, r"\b(?:prefers?|preferred|preference|favou?rite|fan of)\b"),
    ("preference", 2.0, r"\b(?:likes|loves|hates|dislikes|enjoys)\b"),
    ("todo", 3.0, r"\b(?:todo|to-do|action item|reminder)\b"),
    ("todo", 3.0, r"\bremind\s+\w+\s+(?:to|about|that|of)\b"),
    ("todo", 2.5, r"\b(?:don't forget|make sure|follow up|must not forget)\b"),
    ("todo", 2.0, r"\b(?:need|needs|have|has|got)\s+to\b"),
    ("todo", 1.5, r"\bmust\b"),
    ("todo", 1.5, r"\b(?:deadline|due)\b"),
    ("todo", 1.5, r"\bby\s+(?:" + _DAYS + r"|tomorrow|tonight|today|end of|eod|eow|next|noon|\d)"),
    ("todo", 1.5, r"^(?:please\s+)?(?:send|call|email|book|buy|schedule|write|fix|review|check"
                  r"|update|prepare|finish|submit|pay|renew|cancel|order)\b"),
    ("todo", 0.8, r"\bshould\b"),
    ("todo", 1.0, r"\b(?:i'll|i will|i'm going to)\s+\w+"),
    ("goal", 3.0, r"\b(?:my|our|the|main|long-term)\s+(?:goal|aim|objective|target|dream"
                  r"|ambition|mission)\b"),
    ("goal", 2.5, r"\b(?:i'm|i am|we're|we are)\s+planning\b"),
    ("goal", 2.0, r"\b(?:want|wants|wanted)\s+to\b"),
    ("goal", 2.0, r"\b(?:plan|plans|planning|aim|aiming|hope|hoping|intend|intending|trying"
                  r"|working towards?)\s+to\b"),
    ("goal", 2.0, r"\b(?:would like to|'d like to|wish to)\b"),
    ("goal", 0.5, r"\b(?:learn|improve|become|achieve|save up|get better)\b"),
    ("event", 1.5, r"\b(?:happened|went|met|visited|attended|arrived|moved|joined|started"
                   r"|finished|launched|shipped|released|celebrated|was at|were at"
                   r"|had (?:a|an|the|our|my) \w+)\b"),
    ("event", 1.5, r"\b(?:yesterday|last (?:night|week|month|year|weekend)|ago|this morning"
                   r"|earlier today)\b"),
    ("event", 0.5, r"\b(?:on|last) (?:" + _DAYS + r")\b"),
    # Inline code that looks like code or a command: code punctuation, or several words.
    ("code", 2.0, r"`[^`\n]*[(){}=./:<>\[\]_\-~$|*#@ ][^`\n]*`"),
)  # fmt: skip
_CUES: dict[str, list[tuple[re.Pattern[str], float]]] = {}
for _kind, _weight, _pattern in _CUE_TABLE:
    _compiled = re.compile(_pattern.replace("'", "['\u2019]"), _I)
    _CUES.setdefault(_kind, []).append((_compiled, _weight))
_ACK_OPENING = re.compile(
    r"^(?:noted|got it|understood|okay|ok|will do|done|gotcha|roger|confirmed)\b"
    r"\s*[:,.!\u2014\u2013-]",
    _I,
)
_META = re.compile(
    r"^(?:back again|i['\u2019]m back|switching to \w+|moving to \w+|let me (?:think|check|see)"
    r"|one (?:sec|second|moment)|brb|hold on|hang on|good (?:morning|evening|night)"
    r"|happy to help|how can i help|anything else)\b",
    _I,
)
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_NUMBER = re.compile(r"\d")
_COPULA = re.compile(
    r"\b(?:is|are|am|was|were|['\u2019]m|['\u2019]re|['\u2019]s|has|have|had|im|ive|youre"
    r"|theyre|thats|hes|shes)\b",
    _I,
)
# Verbs hidden in contractions, with or without the apostrophe chat often drops.
_S_VERB = word_set(
    "it's that's he's she's there's here's what's who's where's how's let's im ive youre "
    "theyre thats hes shes whats theres"
)
# A yes/no question that still asks to name or choose: "any pets?", "tea or coffee?".
_INVITES_A_NAME = re.compile(r"\b(?:any|anything|anywhere|anyone|favou?rite|or)\b", _I)
_WH = ("what", "who", "where", "when", "why", "how", "which")
_ANSWER_FILLERS = word_set("oh ah um umm uh hmm well so haha lol ahh ohh and but hey wow")
# Words a greeting shares with the question it follows; they make no answer of it.
_GREETING_STEMS = frozenset(stem(w) for w in ("morning", "afternoon", "evening", "night"))
# Leads of an exclamation that reacts to what was said ("What a view!", "How lovely!").
_REACTIONS = word_set("what how congrats congratulations aww aw omg yay")
_YES_NO = word_set(
    "yes yeah yep yup ya yah yas yea sure absolutely definitely certainly correct right exactly "
    "indeed totally course no nope nah never not naw"
)
_VERBISH = word_set(
    """is are am was were be been being has have had do does did will would can could should
    shall may might must need needs want wants like likes prefer prefers use uses used go goes
    went make makes made get gets got take takes took know knows think thinks said says i we
    you he she they it this that there sound sounds look looks seem seems feel feels felt love
    loves hope hopes guess mean means tell tells"""
)


def content_words(sentence: str) -> list[str]:
    return [w for w in (m.group().lower() for m in _WORD.finditer(sentence)) if w not in STOPWORDS]


def is_small_talk(sentence: str, *, role: str) -> bool:
    """Greetings, thanks, acknowledgements, reactions and meta-chat: nothing worth
    remembering (app/extraction/smalltalk.py)."""
    if is_small_talk_sentence(sentence):
        return True
    if _META.match(sentence.strip()):
        return True
    # An assistant's "Noted: …"/"Got it, …" only echoes what the user said.
    return role == "assistant" and bool(_ACK_OPENING.match(sentence.strip()))


def scores(sentence: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for kind, cues in _CUES.items():
        total = sum(weight for pattern, weight in cues if pattern.search(sentence))
        if total:
            totals[kind] = total
    return totals


def classify(sentence: str, *, role: str) -> str | None:
    """The sentence's kind, or None when it is not worth a memory."""
    if is_small_talk(sentence, role=role):
        return None
    text = sentence.strip()
    totals = scores(text)
    if text.endswith("?"):
        return "todo" if is_request_to_remember(text) else None
    best = max(
        (kind for kind, total in totals.items() if total >= MIN_SCORE),
        key=lambda kind: (totals[kind], -KIND_PRIORITY.index(kind)),
        default=None,
    )
    if best is not None:
        return best
    return "fact" if is_informative(text) else None


def is_informative(sentence: str) -> bool:
    """Says something concrete: a number, a name, a "X is Y", or enough content words."""
    words = content_words(sentence)
    if not words:
        return False
    if len(words) >= 3:
        return True
    tokens = sentence.split()
    named = any(t[:1].isupper() for t in tokens[1:] if t[1:2].islower() or len(t) > 1)
    return bool(_NUMBER.search(sentence) or named or _COPULA.search(sentence))


def is_fragment(sentence: str) -> bool:
    """A verbless answer such as "Twelve people, the week of March 9." (≤ 12 words).

    Contractions count as verbs ("I'm fine", "that's a cat"), so a clause is never taken
    for a fragment."""
    words = [m.group().lower().replace("\u2019", "'") for m in _WORD.finditer(sentence)]
    if not words or len(words) > 12 or sentence.strip().endswith("?"):
        return False
    return not any(
        w in _VERBISH or w.endswith(("ed", "n't", "'m", "'re", "'ve", "'ll", "'d")) or w in _S_VERB
        for w in words
    )


def answers(question: str, answer: str) -> bool:
    """Whether `answer` (a fragment) answers `question`, so the two make one memory.

    A yes/no question is answered by a reply opening with yes or no ("Yeah, twice."); any
    question by a reply sharing a content word with it ("How many people?" "Twelve
    people."); an open question (who/what/where …, "any pets?", "tea or coffee?") by any
    reply that is not small talk. Small talk ("Thanks, Melanie!") and exclamations that react
    ("What a nice name!") never answer: they are what glued unrelated turns into one memory."""
    opening = [w.lower().replace("\u2019", "'") for w in _WORD.findall(answer)[:3]]
    lead = next((w for w in opening if w not in _ANSWER_FILLERS), "")
    if answer.rstrip().endswith("!") and lead in _REACTIONS:
        return False  # "What a nice name!", "Congrats on the new job!": said to, not asked
    asks_wh = _asks_wh(question)
    if not asks_wh and lead in _YES_NO:
        return True
    shared = {stem(w) for w in content_words(question)} & {stem(w) for w in content_words(answer)}
    small_talk = is_small_talk_sentence(answer)
    if shared - (_GREETING_STEMS if small_talk else frozenset()):
        return True  # before the small-talk test: "Tea or coffee?" "Coffee, always."
    if small_talk:
        return False  # "Hi, good morning!" after "Morning, what are your plans?"
    return asks_wh or bool(_INVITES_A_NAME.search(question))


def _asks_wh(question: str) -> bool:
    """A wh-word opens or closes one of the question's clauses ("Where to?", "High where?")."""
    for clause in re.split(r"[,;:]|\b(?:and|or|but|so)\b", question, flags=_I):
        words = [w.lower() for w in _WORD.findall(clause)]
        words = [w for w in words if w not in _ANSWER_FILLERS]
        if any(w.startswith(_WH) for w in words[:2] + words[-1:]):
            return True
    return False
