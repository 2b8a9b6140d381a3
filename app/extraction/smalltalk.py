"""Small talk: what says nothing storable, whatever its names, emoji and punctuation.

A sentence is small talk when, once set phrases ("long time no talk", "nice to meet you",
"take care", "thanks for asking") and vocatives ("Thanks, Caroline!", "hi Sam") are taken
out, every word left is a stopword or a small-talk word (app/extraction/vocabulary.py:
greetings, thanks, acknowledgements, interjections, bare reactions such as "so funny" or
"sounds great") or laughter ("hahaha", "lolll"). One word outside them ("Max", "adopted",
"25") keeps the sentence, so a greeting added to a content sentence never removes its memory.

`says_nothing` extends this to a whole text (a turn, a stored memory, a "question? Name:
answer" pair): nothing storable unless some sentence is neither small talk nor a bare
question. The extractor, the store's near-duplicate merging and the dream cycle's cluster
merging all ask the same predicate, so none of them keeps, merges or consolidates chat.
"""

from __future__ import annotations

import re
from functools import lru_cache

from app.extraction.sentences import split_sentences
from app.extraction.vocabulary import SMALL_TALK_WORDS, STOPWORDS, word_set

_I = re.IGNORECASE
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
# Set phrases whose words are not all small talk on their own ("meet", "care", "rest").
_PHRASES = re.compile(
    r"\b(?:long time no (?:see|talk|chat|speak|hear)"
    r"|(?:nice|good|great|lovely|a pleasure|pleasure|glad|happy|fun|so good) (?:to )?"
    r"(?:meet|meeting|see|seeing|talk|talking|chat|chatting|speak|speaking|catch up|catching up"
    r"|hear from|hearing from|have met)(?: with)?(?: you| ya| u| again)*"
    r"|rest of (?:the|your|my|our) (?:day|night|evening|morning|afternoon|week|weekend)"
    r"|have (?:a|an) (?:\w+ )?(?:one|day|night|evening|morning|afternoon|weekend)"
    r"|good (?:day|night|morning|evening|afternoon)|^\s*(?:morning|mornin|night|evening)"
    r"\s*(?=[,!.]|$)|(?:my|your|the) day (?:was|is|has been"
    r"|went|is going)|(?:a|what a) (?:long |good |great |fun |nice )?day"
    r"|take care|sleep (?:well|tight)|sweet dreams|good luck|best of luck|well done"
    r"|(?:talk|speak|see|catch|chat with|talk to|speak to) (?:you|ya|u) (?:later|soon|tomorrow"
    r"|around|then|next time|in a bit)|(?:talk|chat|speak) (?:later|soon)|ttyl|brb|gtg|g2g|gotta go"
    r"|thanks? (?:you )?(?:so much |very much |a lot |again )?for (?:asking|sharing"
    r"|letting me know|checking in|listening|everything|that|this|it|the (?:\w+ )?(?:chat|talk"
    r"|advice|tips?|recommendations?|suggestions?|info|information|help|conversation|update"
    r"|reminder|compliment|words|support)|your (?:\w+ )?(?:help|advice|time|support|words"
    r"|concern|input|recommendations?|suggestions?|tips?))"
    r"|how (?:are|r) (?:you|u|ya)(?: doing)?(?: today| tonight| this (?:morning|evening))?"
    r"|what(?:'s| is) up|wassup|whats up"
    r"|how (?:is|was|has|s) (?:it going|everything|life|things|your (?:day|night|morning|evening"
    r"|afternoon|weekend))|how (?:have|has) (?:you|things|life) been"
    r"|(?:what|how) about (?:you|u)|you too|same (?:here|to you)|me (?:too|neither)"
    r"|no (?:problem|worries|prob)|of course|for sure|my pleasure|any ?time"
    r"|good (?:for you|job|point|idea|question|call|to know)|makes sense|made sense"
    r"|can't wait|cannot wait|oh my god|oh my gosh|my god|my gosh|oh my|i see"
    r"|you're welcome|youre welcome|not bad|not much|nothing much|same old"
    r"|this message was deleted|message deleted|(?:media|image|video) omitted)\b",
    _I,
)
_EMOTICON = re.compile(r"(?<!\w)[:;=8xX][-'^]?[)(\]\[dDpPoO3/\\|*]+(?!\w)|<3+|\^_?\^")
# Laughter and interjections, elongated or not: haha, hehe, lolll, lmaooo, xD, awww, hmmm.
_LAUGHTER = re.compile(
    r"^(?:a?(?:h+[aeiou]+)+h*|(?:[aeiou]h+)+|l+o+l+[lo]*|l+m+f*a+o+|r+o+f+l+|x+d+"
    r"|a+w+|o+h+|a+h+|u+h+|u+m+|h+m+|m+h+m+|e+w+|u+g+h+|o+m+g+|w+o+w+|y+a+y+|w+h?o+a+h*"
    r"|o+o+p+s+|p+f+t*|z+|x+o+(?:x+o*)*)$"
)
# After one of these (and chat words only), a capitalised or clause-final word is a name.
_ADDRESSING = word_set(
    "hi hello hey heya hiya yo thanks thx ty bye goodbye night morning evening congrats "
    "congratulations welcome sorry cheers"
)
_INTERJECTIONS = word_set("omg wow whoa woah yay aw aww oh ooh ah yikes gosh geez jeez dang damn")
_REQUEST_TO_REMEMBER = re.compile(
    r"\b(?:can|could|would|will)\s+you\s+(?:please\s+)?(?:remind|remember|note|save|add"
    r"|book|schedule|keep in mind)\b",
    _I,
)
_FIRST_PERSON = re.compile(
    r"\b(?:i|i'm|im|i've|ive|i'll|i'd|id|me|my|mine|myself|we|we're|we've|we'll|us|our|ours"
    r"|ourselves)\b",
    _I,
)
_LOOSE_END = re.compile(r"(?<=[.!?])\s+")
_LABEL = re.compile(r"^[^\W\d_][\w .'-]{0,40}:\s+")  # "Alice: " before a quoted answer
_CLAUSE = re.compile(r"[,;:!?.\u2026\u2014\u2013()\"]+|\s-+\s")


@lru_cache(maxsize=65536)
def is_chat_word(word: str) -> bool:
    """A word that says nothing on its own: stopword, small talk, laughter, single letter.
    Remembered per word: every sentence of the pipeline asks about the same few thousand."""
    lower = word.casefold().replace("\u2019", "'")
    if lower in STOPWORDS or lower in SMALL_TALK_WORDS or _LAUGHTER.match(lower):
        return True
    if len(lower) == 1 and not lower.isdigit():
        return True
    squeezed = re.sub(r"(.)\1{2,}", r"\1\1", lower)  # "sooo" → "soo", "goood" → "good"
    if squeezed != lower:
        once = re.sub(r"(.)\1+", r"\1", lower)  # "soo" → "so", "yesss" → "yes"
        return any(w in STOPWORDS or w in SMALL_TALK_WORDS for w in (squeezed, once))
    return False


@lru_cache(maxsize=8192)
def is_small_talk_sentence(sentence: str) -> bool:
    """Greetings, thanks, acknowledgements, reactions: no word worth storing is left.
    Remembered for recent sentences: scoring asks about a turn, the extractor about its
    sentences, storing about its gems' sentences, mostly the same strings."""
    text = _EMOTICON.sub(" ", sentence.replace("\u2019", "'"))
    text = _PHRASES.sub(" , ok , ", text)  # a set phrase counts as one chat word
    clauses = [c.strip() for c in _CLAUSE.split(text)]
    clauses = [c for c in clauses if _WORD.search(c)]
    if not clauses:
        return True
    rest = _without_vocatives(clauses)
    return all(is_chat_word(w) for clause in rest for w in _WORD.findall(clause))


def _without_vocatives(clauses: list[str]) -> list[str]:
    """Clauses with names of address removed: a first or last clause that is only one or
    two capitalised words, when the other clauses are chat ("Thanks, Caroline!", "Mel,
    wow"; "Tokyo, Kyoto!" keeps its names), and a name right after a greeting
    (`_drop_addressed_name`)."""
    words = [_WORD.findall(c) for c in clauses]
    kept = list(clauses)
    for index in {0, len(clauses) - 1}:
        others = [w for i, ws in enumerate(words) if i != index for w in ws]
        if (
            len(clauses) > 1
            and 1 <= len(words[index]) <= 2
            and all(w[:1].isupper() for w in words[index])
            and others
            and all(is_chat_word(w) for w in others)
        ):
            kept[index] = ""
    return [" ".join(_drop_addressed_name(_WORD.findall(clause))) for clause in kept]


def _drop_addressed_name(tokens: list[str]) -> list[str]:
    """Tokens without a name of address: after a greeting or thanks and chat words only, a
    capitalised word or the clause's last one ("Hi there Emily", "thanks dude"); after an
    interjection, a capitalised last word ("Omg Sam!", but "Oh Germany sounds nice" keeps
    Germany)."""
    out: list[str] = []
    greeted = exclaimed = False  # since then, only chat words in this clause
    for i, token in enumerate(tokens):
        lower = token.casefold()
        last, capital = i == len(tokens) - 1, token[:1].isupper()
        addressed = (greeted and (capital or last)) or (exclaimed and last and capital)
        if addressed and not is_chat_word(token):
            greeted = exclaimed = False
            continue
        out.append(token)
        thank_you = lower == "you" and [t.casefold() for t in out[-2:-1]] == ["thank"]
        if lower in _ADDRESSING or thank_you:
            greeted = True
        elif _LAUGHTER.match(lower) or lower in _INTERJECTIONS:
            exclaimed = True
        elif not is_chat_word(token):
            greeted = exclaimed = False
    return out


def is_bare_question(sentence: str) -> bool:
    """A question (other than a request to remember or remind): asks, stores nothing."""
    text = sentence.strip()
    return text.endswith("?") and not _REQUEST_TO_REMEMBER.search(text)


def is_request_to_remember(sentence: str) -> bool:
    return bool(_REQUEST_TO_REMEMBER.search(sentence))


def stem(word: str) -> str:
    """A crude stem for matching words across turns: "hikes", "hiked", "hiking" → "hik"."""
    word = word.casefold().replace("\u2019", "'").removesuffix("'s")
    for suffix in ("ing", "ies", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def heard_words(text: str) -> frozenset[str]:
    """Stems of the content words of what the other person said, for `is_echo`."""
    return frozenset(stem(w) for w in _WORD.findall(text.replace("\u2019", "'")))


def is_echo(sentence: str, heard: frozenset[str]) -> bool:
    """A remark on what the other person just said, adding nothing of the speaker's own: no
    first person, and every word is chat or theirs ("Risotto with shrimp sounds delicious!"
    after "I made risotto with shrimp"). Their turn holds the fact; this is the nod."""
    text = sentence.replace("\u2019", "'")
    if not heard or _FIRST_PERSON.search(text):
        return False
    words = [w for w in _WORD.findall(_PHRASES.sub(" ", text)) if not is_chat_word(w)]
    return bool(words) and all(stem(w) in heard for w in words)


def says_nothing(text: str) -> bool:
    """Whether a text (a sentence, a turn, a memory) holds nothing worth storing: each of its
    sentences, a leading "Name: " label dropped, is small talk or a bare question."""
    sentences = split_sentences(text.replace("\u2019", "'"))
    for sentence in sentences:
        sentence = _LABEL.sub("", sentence)
        if is_bare_question(sentence) or is_small_talk_sentence(sentence):
            continue
        # The splitter keeps "Good night, Bea. lol." whole (a lower-case word after a full
        # stop reads as an abbreviation); small talk is judged piece by piece.
        pieces = [p for p in _LOOSE_END.split(sentence) if p.strip()]
        if len(pieces) < 2 or not all(is_small_talk_sentence(p) for p in pieces):
            return False
    return True
