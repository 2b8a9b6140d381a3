"""Log lines an operator's tools can read: with ENGRAM_LOG_FORMAT=json, every line is one JSON
object carrying the ids of the work it belongs to.

Why ids ride in a context variable rather than in each call: the lines that matter are written
deep inside services, libraries and Celery, which know nothing of the request or batch they
serve. The face that starts a unit of work binds its ids once (`log_context`: the API per
request, a stream consumer per batch, a task per run) and every line logged inside, in any
module, carries them. Context variables follow a request into FastAPI's thread pool (it runs
handlers in a copy of the request's context) and stay apart between threads, so concurrent
batches and tasks never lend each other their ids.

A value may be a callable, read when a line is written: the API learns the tenant only once
its key is checked, after the request's context was bound.

Text stays the default, formatted as each process already sets it up (uvicorn's, Celery's,
the CLI's); `configure_logging` switches every handler of the process to JSON.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

# What a log line may carry beyond time, level, logger and message, in this order.
LOG_IDS = (
    "request_id",
    "tenant_id",
    "user_id",
    "batch_id",
    "consumer",
    "extraction_batch_id",
    "task_id",
    "task_name",
)

IdValue = str | Sequence[str] | Callable[[], str | None] | None

_EMPTY: Mapping[str, IdValue] = MappingProxyType({})
_ids: ContextVar[Mapping[str, IdValue]] = ContextVar("engram_log_ids", default=_EMPTY)
# Tokens of contexts opened by one signal and closed by another (a Celery task's pre/post-run).
_open: dict[str, Token[Mapping[str, IdValue]]] = {}
_open_lock = threading.Lock()


def _resolved(value: IdValue) -> str | list[str] | None:
    """A callable is asked now; a sequence of one distinct value is that value."""
    if callable(value):
        value = value()
    if value is None or isinstance(value, str):
        return value
    distinct = sorted({str(v) for v in value})
    if not distinct:
        return None
    return distinct[0] if len(distinct) == 1 else distinct


def current_ids() -> dict[str, str | list[str]]:
    """The ids bound where this is called, resolved, in LOG_IDS order (None left out)."""
    bound = _ids.get()
    out: dict[str, str | list[str]] = {}
    for name in (*LOG_IDS, *sorted(set(bound) - set(LOG_IDS))):
        if name in bound and (value := _resolved(bound[name])) is not None:
            out[name] = value
    return out


@contextmanager
def log_context(**ids: IdValue) -> Iterator[None]:
    """Every line logged inside the block (this thread or task, and the thread-pool calls it
    makes) carries these ids; None values leave an outer binding in place."""
    token = _bind(ids)
    try:
        yield
    finally:
        _ids.reset(token)


def batch_log_ids(refs: Iterable[Sequence[str]]) -> AbstractContextManager[None]:
    """`log_context` for extraction batches given as (tenant, batch id) pairs, the way the
    extraction tasks receive them."""
    pairs = [(str(tenant), str(batch)) for tenant, batch in refs]
    return log_context(
        tenant_id=[tenant for tenant, _ in pairs], extraction_batch_id=[b for _, b in pairs]
    )


def open_context(key: str, **ids: IdValue) -> None:
    """`log_context` for a unit of work whose start and end are two callbacks (a Celery task's
    pre-run and post-run signals), closed by `close_context(key)` in the same thread."""
    token = _bind(ids)
    with _open_lock:
        _open[key] = token


def close_context(key: str) -> None:
    with _open_lock:
        token = _open.pop(key, None)
    if token is not None:
        # Opened in another context (not this thread's): nothing of it is bound here.
        with suppress(ValueError):
            _ids.reset(token)


def new_batch_id() -> str:
    """A short id shared by every line of one batch."""
    return uuid.uuid4().hex[:12]


def _bind(ids: Mapping[str, IdValue]) -> Token[Mapping[str, IdValue]]:
    merged = {**_ids.get(), **{k: v for k, v in ids.items() if v is not None}}
    return _ids.set(MappingProxyType(merged))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the bound ids,
    and the traceback as one string when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        try:
            line.update(current_ids())
        except Exception as exc:  # a line is never lost to an id that cannot be read
            line["ids_error"] = f"{type(exc).__name__}: {exc}"
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def use_json(logger: logging.Logger) -> None:
    """Give every handler of `logger` the JSON formatter (Celery's signals hand us loggers
    whose handlers it has just set up)."""
    formatter = JsonFormatter()
    for handler in logger.handlers:
        handler.setFormatter(formatter)


def configure_logging(log_format: Literal["text", "json"] | str) -> None:
    """With `json`, every handler this process has (root's and those of loggers that do not
    propagate, such as uvicorn's) writes JSON; a process with none gets one on stderr, and
    Python warnings become log lines too. `text` changes nothing."""
    if log_format != "json":
        return
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    use_json(root)
    for logger in list(logging.root.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            use_json(logger)
    logging.captureWarnings(True)
