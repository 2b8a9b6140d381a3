"""Refuse to start a worker whose embedding model does not fit the schema.

A worker serving `extract` or `embed` checks the model's dimension against
ENGRAM_EMBEDDING_DIM when it starts (raising from a bootstep aborts the start with the error),
instead of failing later on the first INSERT into a vector column. An unreachable remote
backend is only warned about here: tasks retry it, and the check runs again on first use.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps

from app.config import get_settings
from app.embedding.base import EmbeddingDimensionError, EmbeddingError
from app.embedding.factory import check_dimension, get_embedder
from workers.queues import EMBED, EXTRACT

_log = logging.getLogger(__name__)


class EmbeddingCheckStep(bootsteps.StartStopStep):
    requires = {"celery.worker.components:Pool"}

    def start(self, worker: Any) -> None:
        selected = getattr(worker.app.amqp.queues, "consume_from", None)
        if selected and not ({EXTRACT, EMBED} & set(selected)):
            return
        settings = get_settings()
        try:
            check_dimension(get_embedder(settings), settings)
        except EmbeddingDimensionError:
            raise
        except EmbeddingError as exc:
            _log.warning("embedding backend not checked at start: %s", exc)
