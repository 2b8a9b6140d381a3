"""Walking the L4 graph: neighbourhoods, entity lookup and related memories, per user and tenant."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from itertools import pairwise

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.session import unit_of_work
from app.extraction.entities import canonicalize
from app.layers.conceptual import repository
from app.layers.conceptual.graph import (
    GraphEdge,
    find_entity,
    neighbourhood,
    related_memories,
    render_facts,
)

AT = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
USER = "alice"


def entity(
    db: Session, tenant: str, name: str, *, user: str = USER, mentions: int = 1
) -> uuid.UUID:
    ids = repository.upsert_entities(
        session=db,
        rows=[
            {
                "tenant_id": tenant,
                "user_id": user,
                "name": name,
                "canonical_name": canonicalize(name),
                "kind": "thing",
                "mentions": mentions,
                "seen_at": AT,
            }
        ],
    )
    return ids[(user, canonicalize(name))]


def relate(
    db: Session,
    tenant: str,
    source: uuid.UUID,
    relation: str,
    target: uuid.UUID,
    *,
    weight: float = 1.0,
    user: str = USER,
    memory_id: uuid.UUID | None = None,
    ended: bool = False,
) -> uuid.UUID:
    relation_id = uuid.uuid4()
    db.execute(
        text(
            "INSERT INTO conceptual.relations (id, tenant_id, user_id, source_entity_id,"
            " target_entity_id, relation_type, weight, memory_id, valid_to)"
            " VALUES (:id, :tenant, :user, :source, :target, :relation, :weight, :memory,"
            " CASE WHEN :ended THEN now() END)"
        ),
        {
            "id": relation_id,
            "tenant": tenant,
            "user": user,
            "source": source,
            "target": target,
            "relation": relation,
            "weight": weight,
            "memory": memory_id,
            "ended": ended,
        },
    )
    return relation_id


def memory(
    db: Session,
    tenant: str,
    content: str,
    *,
    user: str = USER,
    superseded: bool = False,
    archived: bool = False,
) -> uuid.UUID:
    memory_id = uuid.uuid4()
    db.execute(
        text(
            "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content, occurred_at,"
            " valid_from, valid_to, archived_at, content_hash) VALUES (:id, :tenant, :user,"
            " 'fact', :content, :at, :at, CASE WHEN :superseded THEN now() END,"
            " CASE WHEN :archived THEN now() END, :hash)"
        ),
        {
            "id": memory_id,
            "tenant": tenant,
            "user": user,
            "content": content,
            "at": AT,
            "superseded": superseded,
            "archived": archived,
            "hash": hashlib.sha256(content.encode()).hexdigest(),
        },
    )
    return memory_id


def mention(
    db: Session, tenant: str, entity_id: uuid.UUID, memory_id: uuid.UUID, *, user: str = USER
) -> None:
    repository.insert_mentions(
        session=db,
        rows=[
            {
                "tenant_id": tenant,
                "user_id": user,
                "entity_id": entity_id,
                "memory_id": memory_id,
                "turn_id": None,
                "surface": "x",
            }
        ],
    )


def associate(
    db: Session, tenant: str, one: uuid.UUID, other: uuid.UUID, weight: float, *, user: str = USER
) -> None:
    low, high = sorted((one, other))
    db.execute(
        text(
            "INSERT INTO conceptual.associations (tenant_id, user_id, memory_a, memory_b, weight,"
            " co_activations) VALUES (:tenant, :user, :a, :b, :weight, 1)"
        ),
        {"tenant": tenant, "user": user, "a": low, "b": high, "weight": weight},
    )


def triples(edges: list[GraphEdge]) -> list[tuple[str, str, str, int]]:
    return [(e.source, e.relation, e.target, e.depth) for e in edges]


def seed_graph(tenant: str) -> dict[str, uuid.UUID]:
    """alice uses postgres (.9), bob manages alice (.8), alice works at acme (.5);
    postgres is a database, acme uses kubernetes; database is a software (3 hops away)."""
    with unit_of_work(tenant) as db:
        names = ("alice", "bob", "acme", "database", "kubernetes", "software", "mysql")
        ids = {name: entity(db, tenant, name) for name in names}
        ids["postgres"] = entity(db, tenant, "PostgreSQL")
        ids["memory"] = memory(db, tenant, "alice uses postgres")
        relate(
            db, tenant, ids["alice"], "uses", ids["postgres"], weight=0.9, memory_id=ids["memory"]
        )
        relate(db, tenant, ids["bob"], "manages", ids["alice"], weight=0.8)
        relate(db, tenant, ids["alice"], "works_at", ids["acme"], weight=0.5)
        relate(db, tenant, ids["postgres"], "is_a", ids["database"])
        relate(db, tenant, ids["acme"], "uses", ids["kubernetes"])
        relate(db, tenant, ids["database"], "is_a", ids["software"])
        relate(db, tenant, ids["alice"], "uses", ids["mysql"], ended=True)
    return ids


def test_depth_one_keeps_direction_type_and_weight_order(tenant: str) -> None:
    ids = seed_graph(tenant)
    with unit_of_work(tenant) as db:
        edges = neighbourhood(session=db, user_id=USER, entity_id=ids["alice"], depth=1)
    assert triples(edges) == [
        ("alice", "uses", "PostgreSQL", 1),
        ("bob", "manages", "alice", 1),
        ("alice", "works_at", "acme", 1),
    ]
    assert [e.weight for e in edges] == [0.9, 0.8, 0.5]
    first = edges[0]
    assert (first.source_id, first.target_id) == (ids["alice"], ids["postgres"])
    assert first.memory_id == ids["memory"]
    assert edges[1].memory_id is None
    assert render_facts(edges) == [
        "alice —uses→ PostgreSQL",
        "bob —manages→ alice",
        "alice —works at→ acme",
    ]


def test_depth_two_adds_the_next_ring_weighted_by_path(tenant: str) -> None:
    ids = seed_graph(tenant)
    with unit_of_work(tenant) as db:
        edges = neighbourhood(session=db, user_id=USER, entity_id=ids["alice"], depth=2)
    assert triples(edges)[3:] == [
        ("PostgreSQL", "is_a", "database", 2),
        ("acme", "uses", "kubernetes", 2),
    ]
    assert [round(e.weight, 6) for e in edges[3:]] == [0.9, 0.5]
    assert all(e.target != "software" and e.target != "mysql" for e in edges)


def test_ended_relations_neither_appear_nor_bridge(tenant: str) -> None:
    ids = seed_graph(tenant)
    with unit_of_work(tenant) as db:
        from_mysql = neighbourhood(session=db, user_id=USER, entity_id=ids["mysql"], depth=4)
        from_alice = neighbourhood(session=db, user_id=USER, entity_id=ids["alice"], depth=4)
    assert from_mysql == []
    assert "mysql" not in {e.target for e in from_alice}
    assert ("database", "is_a", "software", 3) in triples(from_alice)


def test_a_cycle_terminates_and_lists_each_edge_once(tenant: str) -> None:
    with unit_of_work(tenant) as db:
        a, b, c = (entity(db, tenant, name) for name in ("node a", "node b", "node c"))
        relate(db, tenant, a, "likes", b)
        relate(db, tenant, b, "likes", c)
        relate(db, tenant, c, "likes", a)
        edges = neighbourhood(session=db, user_id=USER, entity_id=a, depth=4)
    assert sorted(triples(edges)) == [
        ("node a", "likes", "node b", 1),
        ("node b", "likes", "node c", 2),
        ("node c", "likes", "node a", 1),
    ]


def test_a_dense_graph_terminates_and_each_edge_appears_once(tenant: str) -> None:
    """A 12-node clique both ways: millions of simple paths, 132 edges."""
    with unit_of_work(tenant) as db:
        nodes = [entity(db, tenant, f"clique {n}") for n in range(12)]
        for one in nodes:
            for other in nodes:
                if one != other:
                    relate(db, tenant, one, "knows", other, weight=0.5)
        edges = neighbourhood(session=db, user_id=USER, entity_id=nodes[0], depth=4, limit=500)
    assert len(edges) == 132
    assert len({(e.source_id, e.target_id) for e in edges}) == 132
    assert {e.depth for e in edges} == {1, 2}


def test_depth_and_limit_are_clamped(tenant: str) -> None:
    with unit_of_work(tenant) as db:
        chain = [entity(db, tenant, f"step {n}") for n in range(7)]
        for one, other in pairwise(chain):
            relate(db, tenant, one, "precedes", other)
        shallow = neighbourhood(session=db, user_id=USER, entity_id=chain[0], depth=0)
        deep = neighbourhood(session=db, user_id=USER, entity_id=chain[0], depth=99)
        one_edge = neighbourhood(session=db, user_id=USER, entity_id=chain[0], depth=4, limit=0)
        plenty = neighbourhood(session=db, user_id=USER, entity_id=chain[0], depth=4, limit=10**6)
    assert [e.depth for e in shallow] == [1]
    assert [e.depth for e in deep] == [1, 2, 3, 4]
    assert deep[-1].target == "step 4"
    assert len(one_edge) == 1
    assert plenty == deep


def test_another_users_graph_never_appears(tenant: str) -> None:
    ids = seed_graph(tenant)
    with unit_of_work(tenant) as db:
        mallory = entity(db, tenant, "secret project", user="mallory")
        # A row of another user pointing at alice's entity: not alice's fact.
        relate(db, tenant, ids["alice"], "uses", mallory, user="mallory")
        edges = neighbourhood(session=db, user_id=USER, entity_id=ids["alice"], depth=4)
        assert "secret project" not in {e.target for e in edges}
        assert neighbourhood(session=db, user_id=USER, entity_id=mallory, depth=4) == []
        assert neighbourhood(session=db, user_id="mallory", entity_id=ids["alice"]) == []
        assert find_entity(session=db, user_id=USER, name="Secret Project") is None
        assert find_entity(session=db, user_id="mallory", name="postgres") is None


def test_another_tenants_graph_is_invisible(tenant: str) -> None:
    ids = seed_graph(tenant)
    other_tenant = f"t-{uuid.uuid4().hex[:10]}"
    with unit_of_work(other_tenant) as db:
        theirs = entity(db, other_tenant, "postgres")
        leak = entity(db, other_tenant, "leaked thing")
        relate(db, other_tenant, theirs, "is_a", leak)
    # An edge from this tenant's entity into the other tenant's graph cannot even be written:
    # the foreign key joins on the tenant too.
    with (
        pytest.raises(IntegrityError, match="fk_relations_source_entity_id_entities"),
        unit_of_work(other_tenant) as db,
    ):
        relate(db, other_tenant, ids["alice"], "uses", leak)
    with unit_of_work(tenant) as db:
        found = find_entity(session=db, user_id=USER, name="Postgres")
        assert found is not None and found.id == ids["postgres"]
        edges = neighbourhood(session=db, user_id=USER, entity_id=ids["alice"], depth=4)
        assert "leaked thing" not in {e.target for e in edges}
        assert neighbourhood(session=db, user_id=USER, entity_id=theirs, depth=4) == []
    with unit_of_work(other_tenant) as db:
        found = find_entity(session=db, user_id=USER, name="postgres")
        assert found is not None and found.id == theirs


def test_find_entity_resolves_variants(tenant: str) -> None:
    with unit_of_work(tenant) as db:
        postgres = entity(db, tenant, "PostgreSQL")
        new_york = entity(db, tenant, "New York")
        for variant in ("Postgres", " postgres ", "POSTGRES", "postgresql", "Postgres's"):
            found = find_entity(session=db, user_id=USER, name=variant)
            assert found is not None and found.id == postgres, variant
        for variant in ("new york", "NEW-YORK", "  New   York\n"):
            found = find_entity(session=db, user_id=USER, name=variant)
            assert found is not None and found.id == new_york, variant
        assert find_entity(session=db, user_id=USER, name="mongodb") is None
        assert find_entity(session=db, user_id=USER, name="  ") is None


def test_related_memories_by_shared_entity_and_association(tenant: str) -> None:
    with unit_of_work(tenant) as db:
        rare = entity(db, tenant, "pgvector", mentions=1)
        common = entity(db, tenant, "alice", mentions=500)
        start = memory(db, tenant, "we index with pgvector, says alice")
        second = memory(db, tenant, "alice also likes pgvector")
        rare_hit = memory(db, tenant, "pgvector has HNSW")
        common_hit = memory(db, tenant, "alice went home")
        both = memory(db, tenant, "alice benchmarked pgvector")
        linked = memory(db, tenant, "the index build took an hour")
        superseded = memory(db, tenant, "pgvector 0.5", superseded=True)
        archived = memory(db, tenant, "old pgvector note", archived=True)
        for memory_id in (start, second, both):
            mention(db, tenant, rare, memory_id)
            mention(db, tenant, common, memory_id)
        for memory_id in (rare_hit, superseded, archived):
            mention(db, tenant, rare, memory_id)
        mention(db, tenant, common, common_hit)
        associate(db, tenant, start, linked, 0.7)
        associate(db, tenant, start, both, 0.2)
        associate(db, tenant, second, both, 0.1)
        associate(db, tenant, start, archived, 0.9)
        associate(db, tenant, start, second, 0.9)
        other_user = memory(db, tenant, "mallory's pgvector", user="mallory")
        mallory_rare = entity(db, tenant, "pgvector", user="mallory")
        mention(db, tenant, mallory_rare, other_user, user="mallory")

        related = related_memories(session=db, user_id=USER, memory_ids=[start, second])
        assert related_memories(session=db, user_id=USER, memory_ids=[]) == []
        top = related_memories(session=db, user_id=USER, memory_ids=[start], limit=0)

    by_id = {r.memory_id: r for r in related}
    assert [r.memory_id for r in related] == [both, rare_hit, linked, common_hit]
    assert set(by_id[both].shared_entities) == {"pgvector", "alice"}
    assert by_id[both].association_weight == pytest.approx(0.3)
    assert by_id[rare_hit].shared_entities == ("pgvector",)
    assert by_id[rare_hit].association_weight == 0
    assert by_id[linked].shared_entities == ()
    assert by_id[linked].score == pytest.approx(0.7)
    assert by_id[common_hit].shared_entities == ("alice",)
    assert by_id[rare_hit].score > by_id[linked].score > by_id[common_hit].score
    assert not {start, second, superseded, archived, other_user} & set(by_id)
    # With one input, the other (associated at 0.9 and sharing both entities) comes first.
    assert len(top) == 1 and top[0].memory_id == second


def test_a_relation_end_is_counted_as_a_mention_of_its_memory(tenant: str) -> None:
    from app.config import get_settings
    from app.embedding.factory import get_embedder
    from app.services.memories import RememberRequest, remember

    settings = get_settings()
    stored = remember(
        tenant,
        RememberRequest(
            user_id="u1", memories=[{"content": "Alice prefers hotels near the old town."}]
        ),
        settings=settings,
        embedder=get_embedder(settings),
    )
    with unit_of_work(tenant) as session:
        rows = session.execute(
            text(
                "SELECT e.canonical_name, e.mention_count, count(m.id) AS linked"
                " FROM conceptual.entities AS e LEFT JOIN conceptual.mentions AS m"
                " ON m.entity_id = e.id AND m.memory_id = :memory"
                " GROUP BY e.canonical_name, e.mention_count"
            ),
            {"memory": stored[0].id},
        ).all()
    counts = {name: (mentions, linked) for name, mentions, linked in rows}
    assert counts["hotels"] == (1, 1)
    assert all(mentions >= 1 and linked == 1 for mentions, linked in counts.values())
