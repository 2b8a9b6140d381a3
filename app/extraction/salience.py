"""Topics, importance and one-line summaries for offline gems: cheap, deterministic scores.

Topics are RAKE-style keyphrases: runs of up to three content words between stopwords and
punctuation, scored by how often their words occur in the whole batch, their length, capitals
in the source (names) and how early they appear. Importance is a per-kind prior plus
specificity (numbers, names, resolved dates, length), clamped to [0, 1].
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from app.extraction.vocabulary import COMMON_VERBS, MONTHS_AND_DAYS, STOPWORDS

MAX_TOPICS = 5
SUMMARY_CHARS = 120
KIND_WEIGHT = {
    "decision": 0.7,
    "todo": 0.65,
    "preference": 0.6,
    "goal": 0.6,
    "event": 0.5,
    "code": 0.45,
    "fact": 0.4,
}

_TOKEN = re.compile(r"[^\W_][\w+#.'\u2019\-]*[\w+#]|[^\W_]|[^\w\s]|_+")
_NUMBER = re.compile(r"\d")
_ISO_DATE = re.compile(r"^\d{4}(?:-\d{2}){0,2}$")
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][\w\-]+|\b[A-Z]{2,}\b|\b\w+[A-Z]\w*\b")


def word_counts(texts: Iterable[str]) -> Counter[str]:
    """Content-word frequencies over the batch, for topic scores."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(t[0] for t in _content_tokens(text, frozenset()) if t is not None)
    return counts


def topics(
    text: str, *, exclude: Iterable[str] = (), counts: Counter[str] | None = None
) -> list[str]:
    """Up to MAX_TOPICS lowercase keyphrases of `text`, best first; names in `exclude` skipped."""
    excluded = frozenset(word.lower() for name in exclude for word in name.split())
    runs: list[list[tuple[str, bool]]] = [[]]
    for token in _content_tokens(text, excluded):
        if (token is None or len(runs[-1]) == 3) and runs[-1]:
            runs.append([])
        if token is not None:
            runs[-1].append(token)
    counts = counts or Counter()
    scored: dict[str, tuple[float, int]] = {}
    for at, run in enumerate(r for r in runs if r):
        phrase = " ".join(word for word, _ in run)
        score = sum(1 + 0.5 * counts.get(word, 0) for word, _ in run) - 0.05 * at
        score += 1.0 if any(capital for _, capital in run) else 0.0
        if phrase not in scored or scored[phrase][0] < score:
            scored[phrase] = (score, at)
    ranked = sorted(scored.items(), key=lambda item: (-item[1][0], item[1][1], item[0]))
    return [phrase for phrase, _ in ranked[:MAX_TOPICS]]


def _content_tokens(text: str, excluded: frozenset[str]) -> list[tuple[str, bool] | None]:
    """(lowercase word, capitalised mid-sentence) per content word; None between phrases."""
    out: list[tuple[str, bool] | None] = []
    for index, match in enumerate(_TOKEN.finditer(text)):
        raw = match.group().strip(".'\u2019-")
        lower = raw.lower().replace("\u2019", "'")
        keep = (
            len(lower) > 2
            and raw[:1].isalpha()
            and lower not in STOPWORDS
            and lower not in COMMON_VERBS
            and lower not in MONTHS_AND_DAYS
            and lower not in excluded
            and not lower.endswith("'s")
            and not _ISO_DATE.match(lower)
        )
        out.append((lower, index > 0 and raw[:1].isupper()) if keep else None)
    return out


def importance(kind: str, content: str, *, dates: int = 0, suspicious: bool = False) -> float:
    """Kind prior + specificity (numbers, names, dates, length); always within [0, 1]."""
    words = content.split()
    numbers = sum(1 for w in words if _NUMBER.search(w))
    names = len(set(_NAME.findall(content)))
    score = KIND_WEIGHT.get(kind, 0.4)
    score += 0.05 * min(3, numbers)
    score += 0.04 * min(4, names)
    score += 0.08 if dates else 0.0
    score += min(0.08, len(words) / 250)
    if len(words) < 4:
        score -= 0.1
    if suspicious:
        score -= 0.2
    return round(min(1.0, max(0.0, score)), 3)


def summarize(text: str, limit: int = SUMMARY_CHARS) -> str:
    """One line of at most `limit` characters, cut at a word with an ellipsis."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"
