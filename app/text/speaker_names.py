"""Speakers' names in a question: whether it names one, and the question without them.

Most questions about a conversation name who said it ("What hobbies does Nicolas have?").
Every dense key of a turn is led by its speaker's name (app/text/passages.py), and in a short
message the name is most of what the vector holds: "Nicolas: Yeah hes super cool" sat closer
to that question than "Nicolas: I like to rollerskate at the nearby rink". So the query is
embedded without the speakers' names (`without_speakers`), and which speaker a question is
about is left to the named-speaker boost of the fusion (app/services/search_turns.py).

A question may also call a speaker by a name the chat does not display: the one the other
speaker calls them by, or a misspelling (`Names`, fed by app/layers/episodic/names.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from app.extraction.vocabulary import MONTHS_AND_DAYS, STOPWORDS, word_set
from app.text.passages import ROLE_NAMES

MIN_WORD = 3  # a word of a several-word name shorter than this names no one alone ("Al")


def name_forms(speaker: str) -> list[str]:
    """The whole display name and, when it has several words, each of 3+ letters ("Fahim"
    names "Fahim Khan": people ask about each other by first name). A role in the name's
    place ("user", "assistant") is no name."""
    words = speaker.split()
    name = " ".join(words)
    if len(name) < 2 or name.casefold() in ROLE_NAMES:
        return []
    return [name, *(w for w in words if len(w) >= MIN_WORD)] if len(words) > 1 else [name]


def _pattern(form: str) -> str:
    """The form as a whole word, with a possessive ("Kate's", or with a typographic
    apostrophe) when it has one."""
    return rf"(?<!\w){re.escape(form)}(?:['\u2019]s)?(?!\w)"


def first_mention(query: str, speaker: str) -> tuple[int, int] | None:
    """Where the query first names the speaker as a whole word ("Kate's" names Kate), by
    any of its forms; None when it does not."""
    spans = [
        found.span()
        for form in name_forms(speaker)
        if (found := re.search(_pattern(form), query, re.IGNORECASE)) is not None
    ]
    return min(spans) if spans else None


def names_speaker(query: str, speaker: str) -> bool:
    """Whether the query names the speaker as a whole word ("Kate's" names Kate)."""
    return first_mention(query, speaker) is not None


# Between two names, what makes them one subject ("Kate and Elise", "Kate & Elise's").
_JOINED = re.compile(r"\s*(?:,|\sand\s|\sor\s|&)\s*", re.IGNORECASE)


def subject_speaker(query: str, speakers: Iterable[str]) -> str | None:
    """The one speaker the question is about: the only one it names, or, when it names
    several, the first one named unless the next is joined to it ("What did Elise buy on
    Kate's advice?" is about Elise, "What do Elise and Kate share?" about no one alone).
    On the development conversations, 87 % of the evidence of questions naming two speakers
    apart was said by the first-named."""
    first = [
        (*span, speaker)
        for speaker in set(speakers)
        if (span := first_mention(query, speaker)) is not None
    ]
    if len(first) < 2:
        return first[0][2] if first else None
    (_, end, speaker), (start, _, _) = sorted(first)[:2]
    if start < end:  # one mention names both ("Fahim" for "Fahim" and "Fahim Khan")
        return None
    return None if _JOINED.fullmatch(query[end:start]) else speaker


def without_speakers(query: str, speakers: Iterable[str]) -> str:
    """The query with every speaker's name taken out (longest forms first, so "Fahim Khan"
    goes whole), whitespace collapsed; the query itself when nothing else would be left."""
    forms = sorted({f for s in speakers for f in name_forms(s)}, key=lambda f: (-len(f), f))
    if not forms:
        return query
    stripped = re.sub("|".join(_pattern(f) for f in forms), " ", query, flags=re.IGNORECASE)
    kept = " ".join(stripped.split())
    return kept if any(c.isalnum() for c in kept) else query


# A name in a question that is not a speaker's display name. People call each other by
# names the chat's display names do not hold ("Kate" for the speaker shown as Emi) and
# questions misspell them ("Akim" for Akib, "Muhammad" for Muhhamed); gems and the
# named-speaker boost know only the display name, so such a word is read as the speaker it
# names (`Names.lexical`) before anything is ranked.
RESEMBLANCE = 0.8  # Jaro-Winkler from which an unheard word is read as a speaker's name
MAX_UNKNOWN = 8  # unknown names of one query looked up (each one index match)
MIN_ADDRESSED = 2  # turns that must call the other speaker by a name to make it theirs
ADDRESSED_SHARE = 0.6  # of the turns that say the name, those that call someone by it
_CANDIDATE = re.compile(r"[^\W\d_]+(?:['\u2019]s)?")
_SENTENCE_END = re.compile(r"[.!?]\s*$")
_NOT_NAMES = STOPWORDS | MONTHS_AND_DAYS | ROLE_NAMES
# Words after which a name is talked about, not called ("went with Sarah.", "to the Maldives!"):
# the stopwords but those that lead a call ("Thank you Kate", "Hey Kate", "Doing well Kate").
_CALL_LEADS = word_set("you hi hey hello thanks thank well ok okay yes yeah sure too so oh dear")
_ABOUT = (STOPWORDS - _CALL_LEADS) | word_set(
    "met meet saw call called named ask asked thanked loves miss missed visit visited & than"
)
_SELF_NAMING = r"(?:i'm|i\u2019m|i am|my name is|my name's|call me|it's|it\u2019s)\s+"


@dataclass(frozen=True)
class Mention:
    """A turn whose own words hold a name: who said it, and to whom (the speaker of the turn
    before it in its session, when that was someone else)."""

    speaker: str | None
    addressee: str | None
    content: str


def unknown_names(query: str, speakers: Iterable[str]) -> list[str]:
    """The query's capitalised words that may name a person but are none of the speakers'
    name forms: not a sentence's first word (unless possessive), a stopword, a month or a day;
    in query order, each once, without a possessive, the first MAX_UNKNOWN."""
    forms = {f.casefold() for s in speakers for f in name_forms(s)}
    found: list[str] = []
    for match in _CANDIDATE.finditer(query):
        token = match.group()
        word = re.sub(r"['\u2019]s$", "", token)
        first = not query[: match.start()].strip() or _SENTENCE_END.search(query[: match.start()])
        if (
            len(word) < MIN_WORD
            or not word[0].isupper()
            or word.isupper()
            or (first and word == token)
            or word.casefold() in _NOT_NAMES
            or word.casefold() in forms
            or word in found
        ):
            continue
        found.append(word)
        if len(found) == MAX_UNKNOWN:
            break
    return found


def jaro_winkler(a: str, b: str) -> float:
    """Jaro-Winkler similarity of two words, case-folded (1.0 the same, 0.0 nothing shared):
    the usual measure for names, where a typo late in the word costs little."""
    a, b = a.casefold(), b.casefold()
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    reach = max(max(len(a), len(b)) // 2 - 1, 0)
    used = [False] * len(b)
    matched_a: list[str] = []
    for i, char in enumerate(a):
        for j in range(max(0, i - reach), min(len(b), i + reach + 1)):
            if not used[j] and b[j] == char:
                used[j] = True
                matched_a.append(char)
                break
    if not matched_a:
        return 0.0
    matched_b = [char for char, hit in zip(b, used, strict=True) if hit]
    m = len(matched_a)
    half_swaps = sum(x != y for x, y in zip(matched_a, matched_b, strict=True))
    jaro = (m / len(a) + m / len(b) + (m - half_swaps / 2) / m) / 3
    prefix = 0
    for x, y in zip(a[:4], b[:4], strict=False):
        if x != y:
            break
        prefix += 1
    return jaro + prefix * 0.1 * (1 - jaro)


def spelled_like(word: str, speakers: Iterable[str]) -> str | None:
    """The one speaker a word the chat never says is a misspelling of: one of their name forms
    starts with the same letter and resembles it (Jaro-Winkler ≥ RESEMBLANCE); none when no
    speaker's does, or several speakers' do."""
    close = {
        speaker
        for speaker in speakers
        for form in name_forms(speaker)
        if form[:1].casefold() == word[:1].casefold() and jaro_winkler(word, form) >= RESEMBLANCE
    }
    return next(iter(close)) if len(close) == 1 else None


def calls_by(content: str, word: str) -> bool:
    """Whether the text calls someone by `word` ("Hey Kate!", "Thanks, Kate.", "So cool
    Kate!"): the name ends a sentence or a clause, and the word before it is not one after
    which a name is talked about ("I went with Kate.")."""
    for match in re.finditer(rf"(?<!\w){re.escape(word)}(?=\s*(?:[,.!?;:]|$))", content):
        before = re.findall(r"[^\W\d_]+|&", content[: match.start()])
        if not before or before[-1].casefold() not in _ABOUT:
            return True
    return False


def called_by_others(word: str, mentions: Sequence[Mention]) -> str | None:
    """The speaker `word` names: the one the turns saying it call by it ("Thanks, Kate!" to
    the speaker before) or who gives it as their own ("I'm Kate"). At least MIN_ADDRESSED such
    turns, nine in ten of them for one speaker, and at least ADDRESSED_SHARE of the turns that
    say the word: a friend the two talk about is named in sentences about them, not called."""
    votes: Counter[str] = Counter()
    for m in mentions:
        if m.speaker is not None and re.search(
            rf"(?<!\w){_SELF_NAMING}{re.escape(word)}(?![\w'\u2019])", m.content, re.IGNORECASE
        ):
            votes[m.speaker] += 1
        elif m.addressee is not None and m.addressee != m.speaker and calls_by(m.content, word):
            votes[m.addressee] += 1
    if not votes:
        return None
    speaker, count = votes.most_common(1)[0]
    if count < MIN_ADDRESSED or count < 0.9 * votes.total():
        return None
    return speaker if count >= ADDRESSED_SHARE * len(mentions) else None


@dataclass(frozen=True)
class Names:
    """The speakers of a conversation and what the words of one question that are not their
    display names stand for."""

    speakers: tuple[str, ...]
    aliases: dict[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        query: str,
        speakers: Iterable[str],
        mentions: Callable[[list[str]], Mapping[str, Sequence[Mention]]],
    ) -> Names:
        """Each unknown name of the query (`unknown_names`), with the turns whose own words
        say it (`mentions(words)`, asked once, only when there are some): the speaker others
        call by it, else, when no turn says it, the speaker whose name it misspells."""
        people = tuple(sorted(set(speakers)))
        words = unknown_names(query, people) if people else []
        said_by_word = mentions(words) if words else {}
        aliases: dict[str, str] = {}
        for word in words:
            said = said_by_word.get(word, ())
            speaker = called_by_others(word, said) if said else spelled_like(word, people)
            if speaker is not None:
                aliases[word] = speaker
        return cls(people, aliases)

    def lexical(self, query: str) -> str:
        """The query with each alias replaced by the display name of the speaker it names
        ("What are Kate's hobbies?" → "What are Emi's hobbies?")."""
        if not self.aliases:
            return query
        pattern = "|".join(rf"(?<!\w){re.escape(w)}(?!\w)" for w in self.aliases)
        return re.sub(pattern, lambda m: self.aliases[m.group()], query)

    def for_embedding(self, query: str) -> str:
        """The query without any speaker's name, called or misspelled."""
        return without_speakers(self.lexical(query), self.speakers)
