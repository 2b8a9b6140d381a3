"""The match_functions_pruned revision: the full-text match functions take the tenant as an
argument that must equal the transaction's tenant, return each row's tsvector, stay callable by
the application's role alone, and the downgrade gives back the setting-only form."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, text

from app.config import Settings
from app.db.migrate import downgrade, upgrade
from app.db.session import unit_of_work
from tests.migrations.test_tenant_keys_and_partitions import Scratch, scratch_database

BEFORE = "c3f1e8a2d5b7"
REVISION = "d9a2b7e4c1f6"
OWNERS = (("ta", "alice"), ("ta", "bob"), ("tb", "alice"))

MEMORIES = (
    "SELECT id, v FROM semantic.match_memories(:tenant, 'alice',"
    " to_tsquery('english', 'harbour'), 10, false, false, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL)"
)
TURNS = (
    "SELECT id, v FROM episodic.match_turns(:tenant, 'alice',"
    " to_tsquery('english', 'harbour'), 10, NULL, NULL, NULL)"
)


@pytest.fixture
def scratch(base_settings: Settings) -> Iterator[Scratch]:
    with scratch_database(base_settings, "match_pruned", BEFORE, _fill) as database:
        yield database


def _fill(conn: Connection) -> None:
    """One turn and one memory about a harbour for each owner."""
    for tenant, user in OWNERS:
        session = conn.execute(
            text(
                "INSERT INTO episodic.sessions (id, tenant_id, user_id, started_at, last_turn_at)"
                " VALUES (gen_random_uuid(), :t, :u, now(), now()) RETURNING id"
            ),
            {"t": tenant, "u": user},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO episodic.turns (id, tenant_id, user_id, session_id, external_id,"
                " role, speaker, content, channel, occurred_at, token_count) VALUES"
                " (gen_random_uuid(), :t, :u, :s, 'm1', 'user', 'Rui',"
                " 'the harbour at dusk, the harbour lights', 'chat', now(), 8)"
            ),
            {"t": tenant, "u": user, "s": session},
        )
        conn.execute(
            text(
                "INSERT INTO semantic.memories (id, tenant_id, user_id, kind, content,"
                " content_hash, occurred_at, valid_from) VALUES (gen_random_uuid(), :t, :u,"
                " 'fact', :c, :h, now(), now())"
            ),
            {"t": tenant, "u": user, "c": f"{user} of {tenant} walks by the harbour", "h": user},
        )


def test_the_match_reads_only_the_named_tenant_when_it_is_the_transactions(
    scratch: Scratch,
) -> None:
    upgrade(scratch.url, REVISION)
    with unit_of_work("ta", engine=scratch.app) as session:
        for statement in (MEMORIES, TURNS):
            rows = session.execute(text(statement), {"tenant": "ta"}).all()
            assert len(rows) == 1
            (lexemes,) = session.execute(
                text("SELECT array_agg(lexeme) FROM unnest(CAST(:v AS tsvector))"),
                {"v": rows[0].v},
            ).one()
            assert "harbour" in lexemes
            # Naming another tenant than the transaction's finds nothing, rows or not.
            assert session.execute(text(statement), {"tenant": "tb"}).all() == []
    with unit_of_work(engine=scratch.app) as session:
        for statement in (MEMORIES, TURNS):
            assert session.execute(text(statement), {"tenant": "ta"}).all() == []
    with scratch.owner.connect() as conn:
        granted = conn.execute(
            text(
                "SELECT p.proname, has_function_privilege(:app, p.oid, 'EXECUTE'),"
                " has_function_privilege('public', p.oid, 'EXECUTE')"
                " FROM pg_proc AS p WHERE p.proname IN ('match_turns', 'match_memories')"
            ),
            {"app": scratch.app_role},
        ).all()
    assert sorted(granted) == [("match_memories", True, False), ("match_turns", True, False)]


def test_the_downgrade_restores_the_setting_only_functions(scratch: Scratch) -> None:
    upgrade(scratch.url, REVISION)
    downgrade(scratch.url, BEFORE)
    with unit_of_work("tb", engine=scratch.app) as session:
        found = session.execute(
            text(
                "SELECT count(*) FROM episodic.match_turns('alice',"
                " to_tsquery('english', 'harbour'), 10, NULL, NULL, NULL)"
            )
        ).scalar_one()
        assert found == 1
        (v,) = session.execute(
            text(
                "SELECT v FROM semantic.match_memories('alice', to_tsquery('english', 'harbour'),"
                " 10, false, false, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
            )
        ).one()
        assert isinstance(v, str)
