"""What a tenant holds, counted under its own row-level security scope."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.db.session import unit_of_work
from app.layers.scopes import not_knowledge
from app.services.jobs import recent_runs
from app.services.status import LAYER_TABLES


def tenant_stats(tenant_id: str) -> dict[str, Any]:
    with unit_of_work(tenant_id, all_agents=True) as session:
        rows = {
            table: int(
                session.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()  # noqa: S608
            )
            for _, table in LAYER_TABLES
        }
        users = int(
            session.execute(
                text(
                    "SELECT count(*) FROM (SELECT user_id FROM episodic.turns UNION"  # noqa: S608
                    f" SELECT user_id FROM semantic.memories WHERE {not_knowledge()}) AS u"
                )
            ).scalar_one()
        )
        current = int(
            session.execute(
                text(
                    "SELECT count(*) FROM semantic.memories"
                    " WHERE valid_to IS NULL AND archived_at IS NULL"
                )
            ).scalar_one()
        )
    jobs = [
        {
            "job": run.job,
            "scope": run.scope,
            "status": run.status,
            "rows": run.rows,
            "errors": run.errors,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "error": run.error,
        }
        for run in recent_runs(tenant_id, limit=20)
    ]
    return {
        "tenant_id": tenant_id,
        "users": users,
        "current_memories": current,
        "rows": rows,
        "jobs": jobs,
    }
