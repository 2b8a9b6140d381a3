"""Procedural memory (L5) arithmetic: confidence, running means, and the keys of a procedure.

A procedure is "for a query like this, this tool sequence worked". Its identity is the pair
(normalised query pattern, canonical tool sequence), both hashed, so re-recording the same
outcome reinforces one row instead of adding another. Confidence grows with the average
success and with repetition: min(avg_success * (1 + executions / 10), 1).

Everything here is pure (no I/O) so the database's copy of the formula can be tested against it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXECUTIONS_SCALE = 10.0  # executions that double the weight of the average success
MAX_EXECUTIONS = 2**31 - 1  # the column is int4; also keeps huge ints from overflowing floats

_WHITESPACE = re.compile(r"\s+")


def _clamp01(value: float) -> float:
    """NaN counts as 0: a bad number must never make a procedure look certain."""
    if math.isnan(value):
        return 0.0
    return min(max(value, 0.0), 1.0)


def confidence(avg_success: float, executions: int) -> float:
    """min(avg_success * (1 + executions/10), 1), clamped to [0, 1].

    Repetition raises trust in a sequence that works, but never past a perfect record of
    ten runs: a success rate of 0.5 needs ten executions to reach 1.0."""
    runs = min(max(int(executions), 0), MAX_EXECUTIONS)
    return _clamp01(_clamp01(avg_success) * (1.0 + runs / EXECUTIONS_SCALE))


def running_mean(mean: float, count: int, value: float) -> float:
    """The mean of `count` values plus one more, without keeping the values.

    Same operation order as the SQL upsert, so both give bit-identical floats."""
    return mean + (value - mean) / (max(int(count), 0) + 1)


@dataclass(frozen=True)
class ProcedureStats:
    """The outcome statistics of one procedure, as stored in meta.procedures."""

    executions: int = 0
    avg_success: float = 0.0
    avg_duration_ms: float = 0.0

    @property
    def confidence(self) -> float:
        return confidence(self.avg_success, self.executions)

    def after(self, success: float, duration_ms: float) -> ProcedureStats:
        """The statistics once one more execution is counted."""
        return ProcedureStats(
            executions=self.executions + 1,
            avg_success=running_mean(self.avg_success, self.executions, success),
            avg_duration_ms=running_mean(self.avg_duration_ms, self.executions, duration_ms),
        )


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def normalise_pattern(query: str) -> str:
    """Lower-case, whitespace collapsed, punctuation stripped at both ends.

    "Deploy the web app  to staging!" and "deploy the web app to staging" are one pattern;
    inner punctuation (file.txt, v1.2) is meaning and stays. NFKC first, so full-width and
    compatibility forms of the same text agree."""
    text = _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", query).lower()).strip()
    start, end = 0, len(text)
    while start < end and (_is_punctuation(text[start]) or text[start].isspace()):
        start += 1
    while end > start and (_is_punctuation(text[end - 1]) or text[end - 1].isspace()):
        end -= 1
    return text[start:end]


def _sha256(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def pattern_hash(query: str) -> str:
    """sha256 of the normalised pattern (normalising is idempotent: raw or normalised agree)."""
    return _sha256(normalise_pattern(query))


def canonical_step(step: str | Mapping[str, Any]) -> dict[str, Any]:
    """A step as a dict with a "tool" name: a bare name "search" is {"tool": "search"}.

    Callers may describe steps either way; the same steps must be the same procedure."""
    if isinstance(step, str):
        return {"tool": step.strip()}
    out = dict(step)
    tool = out.get("tool")
    if isinstance(tool, str):
        out["tool"] = tool.strip()
    return out


def canonical_sequence(tool_sequence: Sequence[str | Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [canonical_step(step) for step in tool_sequence]


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, no NaN: the same value always gives the same text."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sequence_hash(tool_sequence: Sequence[str | Mapping[str, Any]]) -> str:
    """sha256 of the canonical JSON of the canonical steps (order of steps matters, order of
    keys does not). Raises TypeError/ValueError for values JSON cannot hold."""
    return _sha256(canonical_json(canonical_sequence(tool_sequence)))
