"""Every layer's models, imported together so Alembic sees one complete metadata."""

from app.db.base import Base
from app.layers.conceptual.models import Association, Entity, Mention, Relation
from app.layers.episodic.models import RawEvent, Session, Turn, TurnPassage
from app.layers.meta.models import AccessPattern, ApiKey, JobRun, Procedure, Tenant
from app.layers.semantic.models import ExtractionBatch, Memory, Replay
from app.layers.working.models import WorkingSummary

TENANT_TABLES = (
    WorkingSummary,
    Session,
    Turn,
    TurnPassage,
    RawEvent,
    Memory,
    ExtractionBatch,
    Entity,
    Relation,
    Mention,
    Association,
    AccessPattern,
    Procedure,
    ApiKey,
    JobRun,
    Replay,
)

__all__ = ["TENANT_TABLES", "Base", "Tenant"]
