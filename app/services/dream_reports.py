"""What a dream run did (or, dry, would do): per user cycle and for the whole run, for the
job log, the task result and the operator reading a dry run's plan."""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from app.services.graph_analytics import AnalyticsReport


@dataclass(frozen=True)
class PlannedReplay:
    memory_id: uuid.UUID
    priority: float
    source: str  # salience | explicit


@dataclass(frozen=True)
class PlannedLink:
    memory_a: uuid.UUID
    memory_b: uuid.UUID
    origin: str
    weight: float
    created: bool


@dataclass(frozen=True)
class PlannedCluster:
    memory_id: uuid.UUID
    member_ids: tuple[uuid.UUID, ...]
    content: str
    summary: str


@dataclass
class CycleReport:
    tenant_id: str
    user_id: str
    cycle_id: uuid.UUID
    dry_run: bool
    already_done: bool = False  # the cycle's consolidation had committed before this run
    replays: list[PlannedReplay] = field(default_factory=list)
    links: list[PlannedLink] = field(default_factory=list)
    clusters: list[PlannedCluster] = field(default_factory=list)
    analytics: AnalyticsReport | None = None
    entries: int = 0  # salience entries of the user looked at
    covered: list[str] = field(default_factory=list)  # entry ids the cycle consumed
    acked: int = 0

    def summary(self) -> dict[str, Any]:
        """JSON-ready: counts, and the plan itself for a dry run."""
        out: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "cycle_id": str(self.cycle_id),
            "dry_run": self.dry_run,
            "already_done": self.already_done,
            "replays": len(self.replays),
            "links": len(self.links),
            "clusters": len(self.clusters),
            "entries": self.entries,
            "acked": self.acked,
        }
        if self.analytics is not None:
            out["importance_raised"] = len(self.analytics.raised)
            out["community_links"] = len(self.analytics.community_links)
        if self.dry_run:
            out["plan"] = json.loads(
                json.dumps(
                    {
                        "replays": [asdict(r) for r in self.replays],
                        "links": [asdict(r) for r in self.links],
                        "clusters": [asdict(c) for c in self.clusters],
                        "analytics": asdict(self.analytics) if self.analytics else None,
                    },
                    default=str,
                )
            )
        return out


@dataclass
class DreamReport:
    routed: int = 0
    cycles: list[CycleReport] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # held by another run
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (tenant, user, error)

    def summary(self) -> dict[str, Any]:
        return {
            "routed": self.routed,
            "users": len(self.cycles),
            "replays": sum(len(c.replays) for c in self.cycles),
            "clusters": sum(len(c.clusters) for c in self.cycles),
            "skipped": [list(s) for s in self.skipped],
            "failed": [list(f) for f in self.failed],
            "cycles": [c.summary() for c in self.cycles],
        }
