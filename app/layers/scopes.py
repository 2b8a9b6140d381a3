"""Owners of rows that are no user: the tenant's knowledge.

Tenant-wide knowledge (product docs, policies) is stored as the memories of KNOWLEDGE_USER,
so it takes the same road in and is ranked by the same search as any user's memories. It is
no user, though: the per-user passes of background cognition (decay, dreaming, Hebbian
weakening) and the user directory and counts leave it out with NOT_KNOWLEDGE, one predicate
written once. It lives here, below every layer's SQL and every service, so any of them can
import it without a cycle.
"""

from __future__ import annotations

# Not a match of app/streams/events.IDENTIFIER (which must start with a letter or digit), so
# no client-facing user id can name it.
KNOWLEDGE_USER = "~knowledge"


def not_knowledge(column: str = "user_id") -> str:
    """SQL predicate: the row's owner `column` is a user, not the tenant's knowledge. The id
    is a constant of the code (no quote in it), so inlining it is safe and lets the planner
    see it."""
    return f"{column} <> '{KNOWLEDGE_USER}'"
