"""Forgetting: importance halves over a half-life that use, feeling and consolidation stretch.

    half_life = H * (1 + ln(1 + access_count)) * (1 + emotional_intensity)
                  * (1 + 2 * consolidation_strength)
    importance = importance * 0.5 ^ (idle_days / half_life)

H is ENGRAM_DECAY_HALF_LIFE_DAYS (30). idle_days runs from the later of the last decay pass
and the last access, so an access restarts the clock and two passes at the same tick change
nothing the second time (exponential decay composes: two steps of a and b days equal one
step of a + b). A memory under ENGRAM_DECAY_FLOOR (0.03) is archived: out of search, kept,
restorable. The SQL twin of this formula is in app/layers/semantic/decay.py; a test holds
them equal.
"""

from __future__ import annotations

import math


def half_life_days(
    base_days: float, *, access_count: int, emotional_intensity: float, consolidation: float
) -> float:
    return (
        base_days
        * (1.0 + math.log1p(max(access_count, 0)))
        * (1.0 + min(max(emotional_intensity, 0.0), 1.0))
        * (1.0 + 2.0 * min(max(consolidation, 0.0), 1.0))
    )


def decayed(importance: float, *, idle_days: float, half_life: float) -> float:
    return importance * 0.5 ** (max(idle_days, 0.0) / half_life)
