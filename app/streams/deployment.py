"""A worker refuses stream entries stamped by another deployment.

Producers stamp every entry with their deployment's id (a `deployment` field beside `event`).
Keys already keep deployments apart (app/keys.py); the stamp is the second lock, for an entry
that reaches our streams anyway (a producer writing to stream names copied by hand, a stream
restored from another Redis, a wrong ENGRAM_DEPLOYMENT_ID): it is dead-lettered with an error
naming both deployments, never ingested. An entry without a stamp (written by hand, or by a
producer from before stamps) is taken as ours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.streams.entries import StreamEntry

FIELD = "deployment"

DeadLetter = Callable[[StreamEntry, str, int], None]


def stamped(fields: dict[str, str], deployment: str | None) -> dict[str, str]:
    """The entry's fields with the producer's deployment id (when it has one)."""
    return {**fields, FIELD: deployment} if deployment else fields


def foreign_deployment(entry: StreamEntry, expected: str | None) -> str | None:
    """Why the entry is not this deployment's (the dead letter's error), or None."""
    if expected is None or entry.undecodable:
        return None
    stamp = entry.fields.get(FIELD)
    if stamp is None or stamp == expected:
        return None
    return (
        f"DeploymentMismatch: the entry was sent to deployment {stamp[:64]!r}; "
        f"this worker serves deployment {expected!r}"
    )


def refuse_foreign(
    entries: Sequence[StreamEntry], expected: str | None, dead_letter: DeadLetter
) -> list[StreamEntry]:
    """Dead-letter the entries of another deployment; return the rest, in order."""
    kept: list[StreamEntry] = []
    for entry in entries:
        problem = foreign_deployment(entry, expected)
        if problem is None:
            kept.append(entry)
        else:
            dead_letter(entry, problem, entry.deliveries)
    return kept
