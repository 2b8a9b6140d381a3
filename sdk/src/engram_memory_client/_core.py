"""Every operation of the clients, written once.

An operation is a generator that yields what to do next (send a request, or sleep) and is sent
what happened (the response, or the transport error). The blocking client drives it with
`httpx.Client` and `time.sleep`, the asyncio one with `httpx.AsyncClient` and `asyncio.sleep`:
request building, retries, polling and reply parsing never exist twice. The request and its
retries are `_transport.Transport`; reading and editing stored memories, the tenant's
knowledge and procedures `_memory_ops.MemoryOps`; capture, recall, operations and waiting here.

Retries: connection errors, timeouts, 5xx answers and 429 (over the tenant's event rate)
are retried with exponential backoff (jittered; a `Retry-After` header is honoured up to
`MAX_RETRY_AFTER_S`); any other 4xx answer is never retried, since repeating the same request
cannot change it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from engram_memory_client._args import check_wait, items_of, segment
from engram_memory_client._memory_ops import MemoryOps
from engram_memory_client._wire import Op, Sleep
from engram_memory_client.models import (
    Context,
    EventsAccepted,
    ExtractionFlush,
    ExtractionStatus,
    ForgetReport,
    Health,
    SearchHit,
    SearchResults,
    Stats,
    StoredMemories,
    StoredMemory,
)

SENT_TURNS_KEPT = 10_000  # turns remembered for `wait_until_indexed` (oldest forgotten first)


class Core(MemoryOps):
    """Everything both clients do, as operations (generators) their drivers run."""

    def __init__(self, *, retries: int, backoff: float) -> None:
        super().__init__(retries=retries, backoff=backoff)
        self._lock = threading.Lock()
        # (user_id, external_id) -> content of turns this client sent, so that
        # `wait_until_indexed` can search for them without being given a query.
        self._sent: OrderedDict[tuple[str, str], str] = OrderedDict()

    # -- capture ------------------------------------------------------------------------------

    def send_events(self, events: Sequence[Mapping[str, Any]]) -> Op[EventsAccepted]:
        # Retrying POST /v1/events is safe: the server derives each event's id from its
        # external_id (or, without one, from its content) and ingestion skips ids it already
        # has. For the content-derived ids to match across retries, every event gets its
        # timestamp here, once, instead of the server stamping each attempt with its own clock.
        now = datetime.now(timezone.utc)
        batch = [{**e, "timestamp": now} if e.get("timestamp") is None else dict(e) for e in events]
        accepted = yield from self.call(
            "POST", "/v1/events", EventsAccepted, body={"events": batch}
        )
        self._note_turns(batch)
        return accepted

    def _note_turns(self, events: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            for event in events:
                user, external, content = (
                    event.get("user_id"),
                    event.get("external_id"),
                    event.get("content"),
                )
                if event.get("type") != "turn" or not (user and external and content):
                    continue
                key = (str(user), str(external))
                self._sent[key] = str(content)
                self._sent.move_to_end(key)
                while len(self._sent) > SENT_TURNS_KEPT:
                    self._sent.popitem(last=False)

    @staticmethod
    def turn_event(
        user_id: str,
        content: str,
        *,
        role: str,
        external_id: str,
        channel: str,
        timestamp: datetime | None,
        speaker: str | None,
        agent_id: str | None = None,
    ) -> dict[str, Any]:
        """The event of one conversation turn, as `add_turn` sends it."""
        event: dict[str, Any] = {
            "type": "turn",
            "user_id": user_id,
            "role": role,
            "content": content,
            "external_id": external_id,
            "channel": channel,
        }
        if timestamp is not None:
            event["timestamp"] = timestamp
        if speaker is not None:
            event["speaker"] = speaker
        if agent_id is not None:
            event["agent_id"] = agent_id
        return event

    # -- recall -------------------------------------------------------------------------------

    def search(self, user_id: str, query: str, **options: Any) -> Op[SearchResults]:
        body = {"user_id": user_id, "query": query}
        body.update({k: v for k, v in options.items() if v is not None})
        return (yield from self.call("POST", "/v1/search", SearchResults, body=body))

    def context(
        self,
        user_id: str,
        query: str,
        channel: str | None,
        token_budget: int | None,
        *,
        agent_id: str | None = None,
        include_knowledge: bool = False,
    ) -> Op[Context]:
        body = {
            "user_id": user_id,
            "query": query,
            "channel": channel,
            "token_budget": token_budget,
            "agent_id": agent_id,
            "include_knowledge": include_knowledge or None,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return (yield from self.call("POST", "/v1/context", Context, body=body))

    def remember(
        self,
        user_id: str,
        memories: Sequence[Mapping[str, Any] | str],
        *,
        agent_id: str | None = None,
        shared: bool = False,
    ) -> Op[list[StoredMemory]]:
        # Retried like a read: a repeat of a stored memory is folded into it ("reinforced"),
        # it never adds a second row.
        items = items_of(memories, "memories")
        body: dict[str, Any] = {"user_id": user_id, "memories": items}
        if agent_id is not None:
            body.update(agent_id=agent_id, shared=shared)
        stored = yield from self.call("POST", "/v1/memories", StoredMemories, body=body)
        return stored.memories

    # -- users and operations -----------------------------------------------------------------

    def forget_user(self, user_id: str) -> Op[ForgetReport]:
        path = f"/v1/users/{segment(user_id, 'user_id')}"
        report = yield from self.call("DELETE", path, ForgetReport)
        with self._lock:
            for key in [k for k in self._sent if k[0] == user_id]:
                del self._sent[key]
        return report

    def stats(self) -> Op[Stats]:
        return (yield from self.call("GET", "/v1/stats", Stats))

    def health(self) -> Op[Health]:
        # 503 is the answer "degraded" (with the failing checks), not a reason to retry.
        return (yield from self.call("GET", "/healthz", Health, answers=frozenset({503})))

    def extraction_status(self, user_id: str) -> Op[ExtractionStatus]:
        path = f"/v1/users/{segment(user_id, 'user_id')}/extraction"
        return (yield from self.call("GET", path, ExtractionStatus))

    def flush_extraction(self, user_id: str) -> Op[ExtractionFlush]:
        # Retried like a read: a repeat claims only what the first left unclaimed.
        path = f"/v1/users/{segment(user_id, 'user_id')}/extraction/flush"
        return (yield from self.call("POST", path, ExtractionFlush))

    # -- waiting ------------------------------------------------------------------------------

    def wait_until_extracted(
        self, user_id: str, timeout: float, interval: float, flush: bool
    ) -> Op[ExtractionStatus]:
        """Poll the extraction status until caught up; see the clients' docstrings."""
        check_wait(timeout, interval)
        deadline = time.monotonic() + timeout
        flushed = False
        while True:
            status = yield from self.extraction_status(user_id)
            if status.caught_up:
                return status
            if flush and not flushed and status.waiting_for_idle:
                # A flush that claimed nothing (the user was at its bound of batches in
                # flight) did not count: the leftovers still need one.
                flushed = (yield from self.flush_extraction(user_id)).batches > 0
            if time.monotonic() + interval > deadline:
                raise TimeoutError(
                    f"extraction for user {user_id!r} not caught up after {timeout:g}s: "
                    + ", ".join(status.pending)
                )
            yield Sleep(interval)

    def wait_until_indexed(
        self,
        user_id: str,
        query: str | None,
        external_ids: Sequence[str] | None,
        timeout: float,
        interval: float,
    ) -> Op[list[SearchHit]]:
        """Poll search until what was sent is findable; see the clients' docstrings."""
        check_wait(timeout, interval)
        searches = self._indexed_searches(user_id, query, external_ids)
        deadline = time.monotonic() + timeout
        while True:
            found: dict[str, SearchHit] = {}
            missing: list[str] = []
            for text, ids in searches.items():
                results = yield from self.search(
                    user_id, text, limit=100, include_turns=True if ids else None
                )
                if not ids:
                    if results.hits:
                        found[text] = results.hits[0]
                    else:
                        missing.append(f"a hit for query {text!r}")
                    continue
                for external_id in ids:
                    hit = next((h for h in results.hits if external_id in h.source_turn_ids), None)
                    if hit is None:
                        missing.append(f"turn {external_id!r}")
                    else:
                        found[external_id] = hit
            if not missing:
                return list({h.id: h for h in found.values()}.values())
            if time.monotonic() + interval > deadline:
                raise TimeoutError(
                    f"not searchable for user {user_id!r} after {timeout:g}s: " + ", ".join(missing)
                )
            yield Sleep(interval)

    def _indexed_searches(
        self, user_id: str, query: str | None, external_ids: Sequence[str] | None
    ) -> dict[str, list[str]]:
        """The searches `wait_until_indexed` runs: query text -> external ids it must find."""
        wanted = list(dict.fromkeys(external_ids or []))
        if not wanted and not query:
            raise ValueError("give a query, external_ids, or both")
        if query:
            return {query: wanted}
        with self._lock:
            known = {e: self._sent.get((user_id, e)) for e in wanted}
        unknown = [e for e, content in known.items() if content is None]
        if unknown:
            raise ValueError(
                f"no query given and this client did not send turns {unknown} for "
                f"user {user_id!r}: pass the query to search for"
            )
        searches: dict[str, list[str]] = {}
        for external_id, content in known.items():
            searches.setdefault(str(content), []).append(external_id)
        return searches
