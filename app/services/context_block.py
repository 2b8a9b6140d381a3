"""The context block's lines and how they are packed into a token budget.

Every line is laid out here (a live turn with its time, a ranked turn with its speaker, a
memory with its kind), and the packer keeps the block's sections in their fixed order
whatever order they were packed in (app/services/context.py decides what goes in).

Ranked turns and memories are chosen by relevance and shown as a timeline: under a header
per day, in the order they happened, so an exchange reads in its order and a date is written
once for all that happened on it, not in each line: a dated line spent a large share of its
tokens on the date, and the block holds more evidence this way (bench/conversations.py's
evidence in context, held-out 0.797 -> 0.808).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.layers.working.store import WorkingTurn
from app.text.tokens import count_tokens, truncate_to_tokens, words_within
from app.text.untrusted import fence, suspected

HEADERS = {
    "summary": "## Earlier in this conversation",
    "turns": "## Conversation",
    "memories": "## Relevant memories",
    "facts": "## Related facts",
    "procedure": "## Suggested procedure",
}


@dataclass(frozen=True)
class Day:
    """Where a dated line goes: under its day's header, in time order."""

    header: str
    at: datetime


def day_of(at: datetime) -> Day:
    """The line's day in UTC, as stored times are (a time without a zone is taken as UTC),
    so lines from anywhere sort on one clock."""
    at = at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return Day(f"### {at:%Y-%m-%d}", at)


@dataclass
class Packer:
    budget: int
    used: int = 0
    # A section's lines as packed; those packed with a day, per day header, as (time,
    # arrival, line).
    sections: dict[str, list[str]] = field(default_factory=dict)
    days: dict[str, dict[str, list[tuple[datetime, int, str]]]] = field(default_factory=dict)
    packed: dict[str, int] = field(default_factory=dict)  # lines per section, both kinds

    def add(
        self, section: str, line: str, counted: int | None = None, day: Day | None = None
    ) -> bool:
        """`counted`: the tokens of "\n" + line when the caller counted them (in a batch);
        `day`: the line goes under its day (see the module docstring)."""
        counted = count_tokens("\n" + line) if counted is None else counted
        cost = self._cost(section, counted, day)
        if self.used + cost > self.budget:
            return False
        if day is None:
            self.sections.setdefault(section, []).append(line)
        else:
            dated = self.days.setdefault(section, {})
            dated.setdefault(day.header, []).append((day.at, self.packed.get(section, 0), line))
        self.packed[section] = self.packed.get(section, 0) + 1
        self.used += cost
        return True

    def fits(self, section: str, counted: int, day: Day | None = None) -> bool:
        """Whether a line of `counted` tokens (with its separator) would still fit."""
        return self.used + self._cost(section, counted, day) <= self.budget

    def _cost(self, section: str, counted: int, day: Day | None) -> int:
        # Each piece is counted with the separator before it: free for the shipped WordPiece,
        # a token (or part of one) for the BPE tokenizers operators may configure.
        header = 0 if self.packed.get(section) else count_tokens("\n\n" + HEADERS[section])
        if day is not None and day.header not in self.days.get(section, {}):
            header += count_tokens("\n" + day.header)
        return counted + header

    def text(self) -> str:
        blocks = [
            "\n".join([HEADERS[name], *self._lines(name)])
            for name in HEADERS
            if self.packed.get(name)
        ]
        return "\n\n".join(blocks)

    def _lines(self, section: str) -> list[str]:
        """Undated lines as packed, then the dated ones day by day."""
        lines = list(self.sections.get(section, ()))
        days = self.days.get(section, {})
        for header in sorted(days):
            lines.append(header)
            lines += [line for _, _, line in sorted(days[header], key=lambda e: e[:2])]
        return lines


def turn_line(turn: WorkingTurn) -> str:
    who = " ".join((turn.speaker or turn.role).split())
    return f"[{turn.at:%Y-%m-%d %H:%M}] {who}: {' '.join(turn.content.split())}"


def quoted(line: str, flagged: bool) -> str:
    """The line as the block shows it: fenced as untrusted user content when flagged."""
    return fence(line) if flagged else line


def summary_text(summary: str) -> str:
    """The rolling summary (one line per older turn), its suspect lines fenced."""
    return "\n".join(quoted(line, suspected(line)) for line in summary.splitlines())


def item_line(item: dict[str, Any]) -> str:
    """A ranked turn as said (speaker, words); a memory with its kind. Both go under their
    day (`day_of`)."""
    if item["layer"] == "turn":
        who = " ".join((item.get("speaker") or item.get("role") or "someone").split())
        return f"- {who}: {' '.join(item['content'].split())}"
    return f"- {' '.join(item['content'].split())} ({item['kind']})"


def shortened(line: str, limit: int) -> str:
    """The head of a line longer than `limit` tokens, cut at a word boundary within `limit`
    tokens and marked "…"."""
    head = words_within(line, limit - 1)
    if head is None:  # a tokenizer that does not count word by word, or one giant word
        head = truncate_to_tokens(line, limit - 1)
        head = head.rsplit(" ", 1)[0] if " " in head else head
    return f"{head} …"


def normalised(text: str) -> str:
    return " ".join(text.lower().split())
