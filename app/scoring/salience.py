"""Salience of a turn: how much it deserves to be remembered (design "The flow", step 3).

Three parts in [0, 1], all offline and deterministic (no model, no I/O):

* emotional intensity — a lexicon + rules model of affect, urgency and personal stakes;
* connection relevance — overlap with what is already known about the user (entities, goals,
  preferences);
* semantic novelty — 1 - the turn's best cosine similarity to the user's memories.

They combine into one composite by a normalised weighted mean, so the composite is in [0, 1]
whatever the (non-negative) weights are.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache

from app.config import Settings

# -- emotional intensity: lexicon -----------------------------------------------------------------
# Weight tiers over joy, anger, fear, sadness, surprise, urgency and life stakes. Inflections
# not listed are found by light suffix stripping (`_lookup`). A word in two tiers keeps the higher.
_TIERS: dict[float, str] = {
    1.0: """furious enraged livid devastated heartbroken terrified petrified horrified ecstatic
        elated overjoyed euphoric suicidal traumatized traumatised hysterical distraught shattered
        despair desperate outraged catastrophe catastrophic disaster nightmare died death killed
        funeral cancer miscarriage abused assaulted emergency tragedy tragic""",
    0.9: """thrilled fired divorce divorced diagnosed diagnosis panic panicking panicked dying
        disgusted humiliated betrayed bankrupt bankruptcy evicted arrested lawsuit sued furiously
        abuse assault grief grieving mourning widowed layoff layoffs redundant""",
    0.8: """love loved adore adored hate hated hateful angry mad amazing incredible awesome
        fantastic wonderful horrible terrible awful dreadful scared afraid frightened anxious
        anxiety worried stressed overwhelmed exhausted miserable depressed depression lonely
        crying cried tears sobbing ashamed embarrassed urgent urgently asap critical crisis
        wedding married engaged pregnant pregnancy promoted hospital surgery accident proud
        grateful delighted excited blessed shocked stunned astonished amazed unbelievable
        hopeless helpless heartbreaking dead die surgeon injured injury sick hurt stoked gutted
        pissed terrifying horrifying infuriating agony thrilling breathtaking scandal""",
    0.6: """upset sad unhappy annoyed irritated frustrated frustrating disappointed disappointing
        nervous worry fear concerned uneasy tense stress pressure deadline overdue happy glad
        joy joyful cheerful pleased relieved surprised surprise surprising wow omg ill pain
        painful broke lose losing lost fail failed failure rejected rejection birthday
        anniversary graduation graduated baby born hired raise bonus promotion interview exam
        breakup cheated cheating fight argument mistake screwed blame guilty regret sorry
        alone scary dread rage resent jealous envious cry weep excitement hurry rush worse
        worst fantastic brilliant gorgeous beautiful perfect thankful lucky unlucky jinx
        homesick resigned relief ugh yikes argh crap shame awkward tearful sigh grieve""",
    0.4: """fun enjoy enjoyed interesting curious hope hopeful wish important serious problem
        trouble risk risky danger dangerous warning alert priority blocker blocked stuck bug
        crash outage confused confusing weird strange unexpected suddenly finally annoying
        miss missed missing bored boring tired disliked dislike unfair wrong bad sucks
        complain complaint conflict nervously immediately quickly soon tight deal""",
    0.2: """good nice fine thanks thank pleasant cute funny lol haha cool neat okay great""",
}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_LEXICON: dict[str, float] = {}
for _weight, _tier in sorted(_TIERS.items()):
    for _word in _tier.split():
        _LEXICON[_word] = max(_weight, _LEXICON.get(_word, 0.0))

_INTENSIFIERS = _words(
    """very extremely so really incredibly totally absolutely super truly deeply completely
    utterly terribly awfully insanely seriously highly too most especially genuinely
    ridiculously unbelievably damn fucking freaking"""
)
_DIMINISHERS = _words("slightly somewhat bit little barely mildly kinda sorta fairly")
_NEGATORS = _words(
    """not no never none nobody nothing neither nor without hardly cannot dont didnt doesnt
    isnt wasnt arent werent wont cant couldnt shouldnt wouldnt aint"""
)
_FIRST_PERSON = _words("i i'm i've i'll i'd im ive me my mine myself we we're we've our ours us")
_POSSESSIVE = frozenset({"my", "our"})
_STAKES = _words(
    """job career health family kid child children son daughter wife husband partner boyfriend
    girlfriend mom mother dad father parent marriage life money saving house home rent mortgage
    visa boss promotion salary business company startup exam thesis degree surgery diagnosis
    baby pregnancy friend sister brother grandma grandmother grandpa grandfather relationship
    future reputation debt loan trial"""
)
# Emoji (variation selectors stripped) and emoticons with clear sentiment.
_EMOJI: dict[str, float] = {
    "😡": 1.0, "🤬": 1.0, "😭": 0.9, "😱": 0.9, "💔": 0.9, "🆘": 0.9, "😠": 0.8, "😢": 0.8,
    "😍": 0.8, "🥰": 0.7, "❤": 0.7, "🎉": 0.7, "🥳": 0.7, "😨": 0.7, "😰": 0.7, "😤": 0.6,
    "😞": 0.6, "😩": 0.6, "😫": 0.6, "😂": 0.6, "🤩": 0.7, "😔": 0.5, "😃": 0.5, "😀": 0.5,
    "⚠": 0.5, "😊": 0.4, "🔥": 0.4, "🙏": 0.4, "👍": 0.2, "🙂": 0.2,
}  # fmt: skip
_EMOTICONS = re.compile(r"(?<!\S)(?::'\(|:-?\(|:-?\)|:-?D|<3|x-?D)(?!\S)")
_EMOTICON_WEIGHT = 0.4

# Rule constants (see `emotional_intensity`).
_K_EMOTION = 0.5  # saturation rate of 1 - exp(-k * S)
_INTENSIFY, _DIMINISH, _NEGATED = 1.5, 0.6, 0.3  # word modifiers
_CAPS_EMPHASIS, _ELONGATED, _SELF_BOOST = 1.5, 1.3, 0.3  # "UPSET", "sooo", "I ... upset"
_STAKES_BONUS, _EXCLAIM_BONUS, _SHOUT_BONUS = 0.4, 0.2, 0.1  # "my job", "!", "NEVER"
_SHOUT_MIN_LEN = 4  # shorter capitals are mostly acronyms ("API", "AWS")
_MAX_MARKS, _MAX_EMOJI = 3, 5  # "!!!!!!" or a wall of emoji count only this often
_NEG_WINDOW, _MOD_WINDOW, _SELF_WINDOW = 3, 2, 3  # words, within a clause

_TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*|[.,;:!?()\[\]\"]", re.UNICODE)
_BOUNDARY = frozenset('.,;:!?()[]"')
_RUN = re.compile(r"(.)\1{2,}")
_SUFFIXES = (
    ("iest", "y"), ("ier", "y"), ("ies", "y"), ("ied", "y"), ("ily", "y"), ("ing", ""),
    ("ing", "e"), ("ed", ""), ("ed", "e"), ("d", ""), ("es", ""), ("s", ""), ("ly", ""),
    ("ness", ""),
)  # fmt: skip


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")


@lru_cache(maxsize=65536)
def _variants(word: str) -> tuple[str, ...]:
    """The word, then with letter runs ("sooo", "nooo") collapsed to two and to one letter.
    Remembered per word, as `_lookup` and `_term` are: every turn is scored word by word."""
    if not _RUN.search(word):
        return (word,)
    return (word, _RUN.sub(r"\1\1", word), _RUN.sub(r"\1", word))


def _stems(word: str) -> tuple[str, ...]:
    """The word and what light suffix stripping makes of it ("worrying" → "worry")."""
    out = [word]
    for suffix, repl in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)] + repl
            out.append(stem)
            if not repl and len(stem) >= 4 and stem[-1] == stem[-2]:
                out.append(stem[:-1])  # "upsetting" → "upsett" → "upset"
    return tuple(out)


def _in(word: str, vocabulary: Collection[str]) -> bool:
    return any(v in vocabulary for v in _variants(word))


@lru_cache(maxsize=65536)
def _lookup(word: str) -> float:
    for variant in _variants(word):
        for stem in _stems(variant):
            if stem in _LEXICON:
                return _LEXICON[stem]
    return 0.0


def _is_negator(word: str) -> bool:
    return word.endswith("n't") or _in(word, _NEGATORS)


def _clause(lower: list[str], i: int, n: int, step: int) -> list[str]:
    """Up to n word tokens before (step -1) or after (step 1) token i, nearest first, stopping
    at punctuation: a modifier does not reach across a clause boundary."""
    out: list[str] = []
    j = i + step
    while 0 <= j < len(lower) and len(out) < n and lower[j] not in _BOUNDARY:
        out.append(lower[j])
        j += step
    return out


def _stakes_follow(lower: list[str], i: int) -> bool:
    """A stakes noun ("job", "health", "family", …) in the 2 words after a possessive."""
    return any(stem in _STAKES for word in _clause(lower, i, 2, 1) for stem in _stems(word))


def _emotion_sum(text: str) -> float:
    """The unsaturated evidence S of `emotional_intensity`."""
    tokens = _TOKEN.findall(text)
    lower = [t.lower() for t in tokens]
    total = 0.0
    shouted = 0
    for i, (tok, low) in enumerate(zip(tokens, lower, strict=True)):
        if low in _BOUNDARY:
            continue
        caps = len(tok) >= 3 and tok.isupper()
        shout = caps and len(tok) >= _SHOUT_MIN_LEN
        if _in(low, _INTENSIFIERS) or _in(low, _DIMINISHERS) or _is_negator(low):
            shouted += shout
            continue
        if low in _POSSESSIVE and _stakes_follow(lower, i):
            total += _STAKES_BONUS  # "my job", "our whole family"
        weight = _lookup(low)
        if weight == 0.0:
            shouted += shout
            continue
        before = _clause(lower, i, _NEG_WINDOW, -1)
        for distance, word in enumerate(before):
            if distance < _MOD_WINDOW and _in(word, _INTENSIFIERS):
                weight *= _INTENSIFY
            elif distance < _MOD_WINDOW and _in(word, _DIMINISHERS):
                weight *= _DIMINISH
        if any(_is_negator(word) for word in before):
            weight *= _NEGATED
        if caps:
            weight *= _CAPS_EMPHASIS
        if _RUN.search(low):
            weight *= _ELONGATED
        near = before[:_SELF_WINDOW] + _clause(lower, i, _SELF_WINDOW, 1)
        if any(word in _FIRST_PERSON for word in near):
            weight *= 1.0 + _SELF_BOOST
        total += weight
    total += _SHOUT_BONUS * min(shouted, _MAX_MARKS)
    total += _EXCLAIM_BONUS * min(text.count("!") + text.count("‼"), _MAX_MARKS)
    emoji = [_EMOJI[ch] for ch in text if ch in _EMOJI][:_MAX_EMOJI]
    emoji += [_EMOTICON_WEIGHT] * len(_EMOTICONS.findall(text)[: _MAX_EMOJI - len(emoji)])
    return total + sum(emoji)


def emotional_intensity(text: str) -> float:
    """How emotionally charged a turn is, in [0, 1]; intense moments are remembered better.

    Each lexicon word w contributes  c_w = base_w * product of its modifiers:
        * 1.5 per intensifier ("very", "really", ...) and * 0.6 per diminisher ("slightly")
              among the 2 words before it;
        * 0.3 if a negator ("not", "never", "no", "...n't") is among the 3 words before it
              (negation flips valence, and a flipped feeling is milder: "not upset" < "upset");
        * 1.5 in ALL CAPS (3+ letters);  * 1.3 elongated ("sooo happy");
        * 1.3 with a first-person word ("I", "my", "me", "we", ...) within 3 words;
    windows stop at punctuation. Then
        S = sum(c_w) + 0.4 * #(my|our + stakes noun: "my job", "my health", "my family")
            + 0.2 * min(#"!", 3) + 0.1 * min(#other ALL-CAPS words of 4+ letters, 3)
            + sum(weights of up to 5 emoji / emoticons)
        intensity = 1 - exp(-0.5 * S)
    which grows with every cue, saturates smoothly and stays in [0, 1].
    """
    total = _emotion_sum(_normalise(text))
    return _unit(1.0 - math.exp(-_K_EMOTION * total))


# -- connection relevance -------------------------------------------------------------------------
_K_CONNECTION = 1.0
_PHRASE_HIT = 1.0
_TERM_HIT = 0.5
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*", re.UNICODE)
_STOPWORDS = _words(
    """a an the and or but of to in on at for from by with about as into over under up down
    is am are was were be been being do does did have has had will would shall should can could
    may might must i me my mine we us our you your he him his she her it its they them their
    this that these those there here what which who whom whose when where why how not no so
    if then than too very just also only all any some each every more most other such own same
    s t ok okay yes yeah hi hello hey please thanks"""
)


@lru_cache(maxsize=65536)
def _term(word: str) -> str:
    """Lower-case, drop a possessive, fold a plural: "Alice's" → "alice", "goals" → "goal"."""
    word = word.lower().split("'")[0]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _terms(text: str) -> tuple[str, ...]:
    words = (_term(w) for w in _WORD.findall(_normalise(text)))
    return tuple(w for w in words if w and w not in _STOPWORDS and (len(w) > 1 or w.isdigit()))


@lru_cache(maxsize=1024)
def _known_index(known: frozenset[str]) -> tuple[tuple[str, ...], ...]:
    """Distinct normalised known items, sorted so sums are order-independent (cached: a user's
    known set is the same for every turn of a batch)."""
    return tuple(sorted({t for t in (_terms(k) for k in known) if t}))


def connection_relevance(text: str, known: Collection[str]) -> float:
    """How much a turn touches what we already know about the user, in [0, 1].

    Text and known items (entities, goals, preferences) are normalised to content terms
    (lower case, stop words dropped, plurals folded). Each distinct known item scores
        h = 1.0   if it has 2+ terms and they occur as a contiguous phrase in the text,
        h = 0.5 * (matched terms / item terms)   otherwise (a single word: 0.5 or 0),
    so a phrase match outweighs single words; relevance = 1 - exp(-sum(h)), 0 when nothing is
    known (or the text has no content terms).
    """
    items = _known_index(frozenset(known)) if known else ()
    terms = _terms(text) if items else ()
    if not terms:
        return 0.0
    present = set(terms)
    grams: dict[int, set[tuple[str, ...]]] = {}
    total = 0.0
    for item in items:
        n = len(item)
        if n > 1:
            if n not in grams:
                grams[n] = {terms[i : i + n] for i in range(len(terms) - n + 1)}
            if item in grams[n]:
                total += _PHRASE_HIT
                continue
        total += _TERM_HIT * sum(t in present for t in item) / n
    return _unit(1.0 - math.exp(-_K_CONNECTION * total))


# -- semantic novelty -----------------------------------------------------------------------------
def semantic_novelty(max_similarity: float | None) -> float:
    """novelty = clamp(1 - max cosine similarity to the user's memories, 0, 1).

    What repeats known memories adds little; 1.0 when the user has no memories (None) or the
    similarity is unknown (NaN).
    """
    if max_similarity is None or math.isnan(max_similarity):
        return 1.0
    return _unit(1.0 - max_similarity)


# -- composite ------------------------------------------------------------------------------------
def _setting(name: str) -> float:
    """A field's declared default (not the environment's value): keeps this module pure."""
    return float(Settings.model_fields[name].default)


@dataclass(frozen=True)
class SalienceWeights:
    """Relative weights of the three parts; only their ratios matter (they are normalised).

    Defaults are the defaults of the `salience_weight_*` settings; use `from_settings` to honour
    the environment.
    """

    emotional: float = _setting("salience_weight_emotional")
    connection: float = _setting("salience_weight_connection")
    novelty: float = _setting("salience_weight_novelty")

    def __post_init__(self) -> None:
        for name in ("emotional", "connection", "novelty"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"salience weight {name!r} must be finite and >= 0, got {value}")
        if self.emotional + self.connection + self.novelty <= 0:
            raise ValueError("salience weights must not all be zero")

    @classmethod
    def from_settings(cls, settings: Settings) -> SalienceWeights:
        return cls(
            emotional=settings.salience_weight_emotional,
            connection=settings.salience_weight_connection,
            novelty=settings.salience_weight_novelty,
        )


def _unit(value: float) -> float:
    """Clamp to [0, 1]; NaN counts as 0 (no evidence)."""
    if math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, value))


def composite_salience(
    emotional: float, connection: float, novelty: float, weights: SalienceWeights | None = None
) -> float:
    """salience = (w_e*E + w_c*C + w_n*N) / (w_e + w_c + w_n), parts clamped to [0, 1].

    A normalised weighted mean, so it is in [0, 1] for any valid weights.
    """
    w = weights or SalienceWeights()
    mean = w.emotional * _unit(emotional) + w.connection * _unit(connection)
    mean += w.novelty * _unit(novelty)
    return _unit(mean / (w.emotional + w.connection + w.novelty))


@dataclass(frozen=True)
class SalienceScore:
    """The three parts of a turn's salience and their composite, all in [0, 1]."""

    emotional: float
    connection: float
    novelty: float
    composite: float


def score_turn(
    text: str,
    known: Collection[str] = (),
    max_similarity: float | None = None,
    weights: SalienceWeights | None = None,
) -> SalienceScore:
    """Score one turn: its emotional intensity, relevance to `known`, novelty, and composite."""
    emotional = emotional_intensity(text)
    connection = connection_relevance(text, known)
    novelty = semantic_novelty(max_similarity)
    return SalienceScore(
        emotional=emotional,
        connection=connection,
        novelty=novelty,
        composite=composite_salience(emotional, connection, novelty, weights),
    )
