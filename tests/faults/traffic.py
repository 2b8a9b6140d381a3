"""A client of the real API process that remembers every answer it got and what was accepted.

A connection the server drops without answering (an unhandled error in the app) counts as a
5xx: the client got no answer it could act on.

A 503 (with Retry-After) is the right answer while a dependency is down, so answers are kept
with whether a fault was in progress; any other 5xx, or a 503 outside a fault, is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

DROPPED = 0  # the status recorded when the server closed the connection without an answer


@dataclass(frozen=True)
class Answer:
    route: str
    status: int
    during_fault: bool
    retry_after: bool


@dataclass
class ApiClient:
    http: httpx.Client
    tenant: str
    answers: list[Answer] = field(default_factory=list)
    sent: set[str] = field(default_factory=set)  # external ids answered with 202
    during_fault: bool = False

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None) -> int:
        """One request (`raw`: a body sent as it is, for input that is not valid JSON); its
        status, or DROPPED when the server broke the connection instead of answering."""
        try:
            if raw is not None:
                response = self.http.request(
                    method, path, content=raw, headers={"Content-Type": "application/json"}
                )
            else:
                response = self.http.request(method, path, json=body)
        except httpx.TransportError:
            status, retry_after = DROPPED, False
        else:
            status, retry_after = response.status_code, "retry-after" in response.headers
        self.answers.append(
            Answer(f"{method} {path.split('?')[0]}", status, self.during_fault, retry_after)
        )
        return status

    def send(self, events: Sequence[dict[str, Any]]) -> bool:
        """POST /v1/events; True (and the events count as sent) on 202."""
        accepted = self.call("POST", "/v1/events", {"events": list(events)}) == 202
        if accepted:
            self.sent.update(e["external_id"] for e in events)
        return accepted

    def search(self, user: str, query: str = "quarterly plan") -> int:
        return self.call("POST", "/v1/search", {"user_id": user, "query": query})

    def send_until_taken(
        self, batches: list[list[dict[str, Any]]], attempts: int = 200
    ) -> list[list[dict[str, Any]]]:
        """Re-send what was refused, as a client would, until the API takes it (the first
        202 ends the fault); returns what is still refused after `attempts` tries."""
        waiting = list(batches)
        for _ in range(attempts):
            if not waiting:
                break
            if self.send(waiting[0]):
                self.during_fault = False
                waiting.pop(0)
        return waiting

    def server_errors(self) -> list[Answer]:
        """5xx answers that are errors: anything but a 503 during a fault, which must say when
        to retry (the health check says "degraded" instead)."""
        return [
            a for a in self.answers if (a.status == DROPPED or a.status >= 500) and not _expected(a)
        ]


def _expected(answer: Answer) -> bool:
    told = answer.retry_after or answer.route == "GET /healthz"
    return answer.during_fault and answer.status == 503 and told
