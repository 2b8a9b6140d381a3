"""`engram migrate --revision R` reaches any revision, whichever way it lies, and /healthz
refuses "ok" while the database is behind this code's head."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from fastapi.testclient import TestClient

from app.api.app import create_app
from app.config import Settings
from app.db.bootstrap import drop_database, resolve_urls
from app.db.migrate import (
    MigrationError,
    downgrades,
    head_revision,
    history,
    migrate_to,
    schema_state,
)
from app.embedding.base import Embedder, Owner


class _NoModel(Embedder):
    """/healthz never embeds; this keeps the model out of these tests."""

    name = "none"
    dim = 384

    def embed(
        self, texts: Sequence[str], owners: Sequence[Owner] | None = None
    ) -> list[list[float]]:
        raise AssertionError("healthz must not embed")


@pytest.fixture(scope="module")
def scratch(base_settings: Settings) -> Iterator[tuple[Settings, str]]:
    if base_settings.database_url:
        pytest.skip("needs the embedded server to create a scratch database")
    name = f"{base_settings.database_name}_any_revision"
    drop_database(name, base_settings)
    settings = base_settings.model_copy(update={"database_name": name})
    yield settings, resolve_urls(settings).owner
    from app.db.session import dispose_engines

    dispose_engines()
    drop_database(name, base_settings)


def test_every_direction_and_spelling_reaches_its_revision(scratch: tuple[Settings, str]) -> None:
    _, url = scratch
    revisions = [rev for rev, _ in history()]
    head = head_revision()
    assert revisions[-1] == head
    assert schema_state(url).current is None

    before, after = migrate_to("head", url)
    assert (before.current, after.current) == (None, head)
    assert migrate_to("-1", url)[1].current == revisions[-2]
    assert migrate_to("-2", url)[1].current == revisions[-4]
    assert migrate_to("+1", url)[1].current == revisions[-3]
    assert migrate_to(revisions[1], url)[1].current == revisions[1]  # down, by id
    assert migrate_to(revisions[3][:6], url)[1].current == revisions[3]  # up, by prefix
    assert migrate_to(revisions[3], url)[0].current == revisions[3]  # where it is: no-op
    assert migrate_to("base", url)[1].current is None
    assert schema_state(url).describe().startswith("empty")
    assert migrate_to("head", url)[1].at_head


def test_unreachable_revisions_are_refused_and_change_nothing(
    scratch: tuple[Settings, str],
) -> None:
    _, url = scratch
    migrate_to("head", url)
    for revision in ("nope", "", "+1", f"-{len(history()) + 1}"):
        with pytest.raises(MigrationError):
            migrate_to(revision, url)
        assert schema_state(url).at_head, revision
    migrate_to("base", url)
    with pytest.raises(MigrationError, match="nothing to undo"):
        migrate_to("-1", url)
    migrate_to("head", url)


def test_which_moves_are_downgrades() -> None:
    revisions = [rev for rev, _ in history()]
    head = revisions[-1]
    assert downgrades("base", head) and downgrades("-1", head)
    assert not downgrades("base", None) and not downgrades("-1", None)
    assert not downgrades("head", revisions[0]) and not downgrades("+1", revisions[0])
    assert downgrades(revisions[0], head) and not downgrades(head, revisions[0])
    assert not downgrades("no-such-revision", head)


def test_healthz_is_503_while_the_schema_is_behind(scratch: tuple[Settings, str]) -> None:
    settings, url = scratch
    migrate_to("head", url)
    migrate_to("-1", url)
    behind = schema_state(url).current
    with TestClient(create_app(settings, embedder=_NoModel())) as client:
        response = client.get("/healthz")
        assert response.status_code == 503
        assert response.headers["Retry-After"]
        body = response.json()
        assert body["status"] == "degraded"
        assert body["unavailable"] == ["schema"]
        assert body["checks"]["database"] == "ok" and body["checks"]["redis"] == "ok"
        assert body["checks"]["schema"].startswith(f"behind: at {behind}")
        assert (body["schema_revision"], body["schema_head"]) == (behind, head_revision())

        migrate_to("head", url)
        response = client.get("/healthz")
        assert response.status_code == 200, response.text
        assert response.json()["schema_revision"] == head_revision()
