"""Graph analytics of one user's memory graph (networkx), run by the dream cycle.

The graph is read from L4 in one statement and bounded by ENGRAM_DREAM_GRAPH_MAX_NODES (the
user's most important current memories): memories are nodes, associations are weighted edges
between them, and entity mentions join memories to entity nodes (a bipartite memory-entity
graph, so a popular entity costs one edge per mention, never a clique). Entities mentioned by
a single memory of the graph are dropped (they link nothing).

* PageRank (weighted, damping 0.85) measures how central each memory is. A memory ranked at
  least HUB_RATIO times the mean memory rank gets importance ← max(importance,
  IMPORTANCE_CEILING · rank / top rank): central memories resist decay, a hub stays
  important; nothing is ever lowered. One UPDATE … FROM jsonb_to_recordset.
* Communities (Louvain, fixed seed, so the same graph always splits the same way): in each
  community of at least COMMUNITY_MIN memories, the most central memory is linked to the
  others (origin 'community', weight COMMUNITY_WEIGHT, at most COMMUNITY_LINKS per
  community), where no edge exists yet. One INSERT … ON CONFLICT DO NOTHING.

Community links are left out of the graph that is read, and existing edges are never touched,
so analytics over an unchanged graph is a fixed point: running it again writes nothing.

networkx's own `pagerank` needs scipy, which Engram does not depend on; `pagerank` below is
the same power iteration (uniform teleport, dangling mass spread evenly) over numpy arrays.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import networkx as nx
import numpy as np
from sqlalchemy.orm import Session

from app.config import Settings
from app.layers.semantic import dream as dream_sql

PAGERANK_ALPHA = 0.85
PAGERANK_MAX_ITER = 100
PAGERANK_TOL = 1e-10  # per node, on the L1 change between iterations
HUB_RATIO = 2.0
IMPORTANCE_CEILING = 0.9
LOUVAIN_SEED = 20_260_101
COMMUNITY_MIN = 3
COMMUNITY_LINKS = 20
COMMUNITY_WEIGHT = 0.1


@dataclass
class AnalyticsReport:
    nodes: int = 0  # memories and entities in the graph
    edges: int = 0
    memories: int = 0
    communities: int = 0  # communities of at least COMMUNITY_MIN memories
    raised: list[tuple[uuid.UUID, float]] = field(default_factory=list)  # (memory, importance)
    community_links: list[tuple[uuid.UUID, uuid.UUID]] = field(default_factory=list)


@dataclass
class MemoryGraph:
    """Nodes 0..len(memories)-1 are the memories (in id order), the rest entities."""

    graph: nx.Graph
    memories: list[uuid.UUID]

    def is_memory(self, node: int) -> bool:
        return node < len(self.memories)


def build_graph(rows: dream_sql.GraphRows) -> MemoryGraph:
    """Integer nodes inserted in id order (so seeded community detection is reproducible),
    weighted edges; entities mentioned by fewer than two of the graph's memories dropped."""
    memories = sorted(rows.importance, key=str)
    index: dict[uuid.UUID, int] = {m: i for i, m in enumerate(memories)}
    mention_count: dict[uuid.UUID, int] = {}
    for memory, entity, _ in rows.mentions:
        if memory in index:
            mention_count[entity] = mention_count.get(entity, 0) + 1
    entities = sorted((e for e, n in mention_count.items() if n > 1), key=str)
    for i, entity in enumerate(entities, start=len(memories)):
        index[entity] = i
    edges = [
        (index[a], index[b], w)
        for a, b, w in rows.associations
        if a in index and b in index and a != b and index[a] < len(memories)
    ]
    edges += [
        (index[memory], index[entity], w)
        for memory, entity, w in rows.mentions
        if memory in index and entity in index and index[entity] >= len(memories)
    ]
    edges.sort()
    g = nx.Graph()
    g.add_nodes_from(range(len(memories) + len(entities)))
    g.add_weighted_edges_from(edges)
    return MemoryGraph(graph=g, memories=memories)


def pagerank(g: nx.Graph, alpha: float = PAGERANK_ALPHA) -> dict[Any, float]:
    """Weighted PageRank of an undirected graph (each edge counts both ways)."""
    nodes = list(g)
    n = len(nodes)
    if n == 0:
        return {}
    index = {node: i for i, node in enumerate(nodes)}
    m = g.number_of_edges()
    src = np.empty(2 * m, dtype=np.int64)
    dst = np.empty(2 * m, dtype=np.int64)
    weight = np.empty(2 * m, dtype=np.float64)
    for k, (u, v, w) in enumerate(g.edges(data="weight", default=1.0)):
        i, j = index[u], index[v]
        src[2 * k], dst[2 * k], src[2 * k + 1], dst[2 * k + 1] = i, j, j, i
        weight[2 * k] = weight[2 * k + 1] = max(float(w), 0.0)
    out = np.bincount(src, weights=weight, minlength=n)
    dangling = out <= 0
    share = np.divide(weight, out[src], out=np.zeros_like(weight), where=out[src] > 0)
    rank = np.full(n, 1.0 / n)
    for _ in range(PAGERANK_MAX_ITER):
        previous = rank
        rank = alpha * np.bincount(dst, weights=previous[src] * share, minlength=n)
        rank += (alpha * previous[dangling].sum() + 1.0 - alpha) / n
        if float(np.abs(rank - previous).sum()) < n * PAGERANK_TOL:
            break
    return dict(zip(nodes, rank.tolist(), strict=True))


def importance_targets(
    mg: MemoryGraph, ranks: dict[Any, float], importance: dict[uuid.UUID, float]
) -> list[tuple[uuid.UUID, float]]:
    """(memory, new importance) for the hubs whose importance their rank raises."""
    memory_ranks = {int(n): r for n, r in ranks.items() if mg.is_memory(int(n))}
    if not memory_ranks:
        return []
    mean = sum(memory_ranks.values()) / len(memory_ranks)
    top = max(memory_ranks.values())
    out: list[tuple[uuid.UUID, float]] = []
    for node, r in sorted(memory_ranks.items()):
        if r < HUB_RATIO * mean or top <= 0:
            continue
        target = round(IMPORTANCE_CEILING * r / top, 6)
        memory = mg.memories[node]
        if target > importance.get(memory, 1.0) + 1e-6:
            out.append((memory, target))
    return out


def community_pairs(
    mg: MemoryGraph, ranks: dict[Any, float]
) -> tuple[int, list[tuple[uuid.UUID, uuid.UUID]]]:
    """(communities of >= COMMUNITY_MIN memories, pairs centre -> member to link)."""
    if mg.graph.number_of_edges() == 0:
        return 0, []
    found = nx.community.louvain_communities(mg.graph, weight="weight", seed=LOUVAIN_SEED)
    count = 0
    pairs: list[tuple[uuid.UUID, uuid.UUID]] = []
    for community in sorted(found, key=min):
        members = sorted(n for n in community if mg.is_memory(n))
        if len(members) < COMMUNITY_MIN:
            continue
        count += 1
        ordered = sorted(members, key=lambda n: (-ranks.get(n, 0.0), n))
        centre = mg.memories[ordered[0]]
        pairs += [(centre, mg.memories[n]) for n in ordered[1 : 1 + COMMUNITY_LINKS]]
    return count, pairs


def analyse(
    session: Session,
    settings: Settings,
    tenant_id: str,
    user_id: str,
    *,
    now: datetime | None = None,
) -> AnalyticsReport:
    """PageRank into importance and communities into links, for one user, in the caller's
    transaction (one read, at most two writes)."""
    rows = dream_sql.load_graph(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        max_nodes=settings.dream_graph_max_nodes,
    )
    mg = build_graph(rows)
    g = mg.graph
    # Memories joined to nothing carry no structure: they only dilute the ranks' mean.
    g.remove_nodes_from([n for n, degree in list(g.degree()) if degree == 0])
    report = AnalyticsReport(
        nodes=g.number_of_nodes(),
        edges=g.number_of_edges(),
        memories=sum(1 for n in g if mg.is_memory(n)),
    )
    if report.edges == 0:
        return report
    ranks = pagerank(g)
    report.raised = dream_sql.raise_importance(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        targets=importance_targets(mg, ranks, rows.importance),
    )
    report.communities, pairs = community_pairs(mg, ranks)
    report.community_links = dream_sql.add_community_links(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        pairs=pairs,
        weight=COMMUNITY_WEIGHT,
        at=now or datetime.now(UTC),
    )
    return report
    ranks = pagerank(g)
    report.raised = dream_sql.raise_importance(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        targets=importance_targets(ranks, rows.importance),
    )
    report.communities, pairs = community_pairs(g, ranks)
    report.community_links = dream_sql.add_community_links(
        session=session,
        tenant_id=tenant_id,
        user_id=user_id,
        pairs=pairs,
        weight=COMMUNITY_WEIGHT,
        at=now or datetime.now(UTC),
    )
    return report
