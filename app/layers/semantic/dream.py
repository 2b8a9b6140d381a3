"""SQL for the dream cycle: replay candidates, receipts, cross-links, merged clusters, and the
reads and writes of graph analytics. Set-based (one statement per step, whatever the batch)
and never commits: the caller owns the transaction.

A replay receipt (semantic.replays, keyed by cycle and memory) is inserted before any effect
and only the memories whose receipt was new get effects, so however often a cycle is resumed
its effects on a memory happen once.

Plan shapes are kept safe for a tenant the planner has no statistics for yet (it then expects
one row per tenant and user): rows are found by id lists passed as constants (one scan, at
worst over the user's rows) and per-row lookups go by primary key without tenant or user
predicates (row-level security still scopes them to the tenant), so a misestimate can never
turn into a scan of the user's rows per row.

One module per step: dream_candidates (what may be replayed), dream_replay (receipts and
consolidation strength), dream_links (cross-links), dream_clusters (merged clusters),
dream_graph (graph analytics' reads and writes), dream_users (who to dream for).
"""

from __future__ import annotations

from app.layers.semantic.dream_candidates import (
    CandidateRow,
    TurnMemory,
    explicit_candidates,
    memories_of_turns,
)
from app.layers.semantic.dream_clusters import (
    ConsolidatedRow,
    ReplayedRow,
    insert_consolidated,
    replayed_info,
)
from app.layers.semantic.dream_graph import (
    GraphRows,
    add_community_links,
    load_graph,
    raise_importance,
)
from app.layers.semantic.dream_links import (
    LinkRow,
    link_replayed,
    shared_entity_pairs,
    similar_pairs,
)
from app.layers.semantic.dream_replay import cycles_done, receipts, replay
from app.layers.semantic.dream_users import recent_users

__all__ = [
    "CandidateRow",
    "ConsolidatedRow",
    "GraphRows",
    "LinkRow",
    "ReplayedRow",
    "TurnMemory",
    "add_community_links",
    "cycles_done",
    "explicit_candidates",
    "insert_consolidated",
    "link_replayed",
    "load_graph",
    "memories_of_turns",
    "raise_importance",
    "receipts",
    "recent_users",
    "replay",
    "replayed_info",
    "shared_entity_pairs",
    "similar_pairs",
]
