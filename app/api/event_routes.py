"""POST /v1/events: the capture door (validated here, queued on the streams by the producer)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Request, status
from pydantic import BaseModel, ConfigDict, Field

from app.api import schemas
from app.api.auth import Tenant
from app.api.event_schema import event_item_schema
from app.api.shares import within_share
from app.declared import Declared
from app.streams.events import (
    Event,
    EventValidationError,
    conflicting_duplicate,
    parse_event,
)
from app.streams.producer import NotReplicatedError, ProducerError, StreamFullError

router = APIRouter(prefix="/v1", responses=schemas.ERROR_RESPONSES)

MAX_EVENTS = 1000


# Each item is parsed by its type at the door (parse_event); the schema shows the variants.
EventItem = Annotated[dict[str, Any], Declared(event_item_schema, replace=True)]


class EventBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    events: list[EventItem] = Field(min_length=1, max_length=MAX_EVENTS)


@router.post(
    "/events",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["capture"],
    response_model=schemas.EventsAccepted,
)
def post_events(batch: EventBatch, tenant: Tenant, request: Request) -> dict[str, Any]:
    """Queue events (turns, typing_start, channel_switch, …) for ingestion; returns their ids.

    Each event is validated; one bad event refuses the whole batch with the field named.
    The tenant is the key's: an event naming another tenant is refused. A tenant sending
    faster than its share (ENGRAM_TENANT_EVENTS_PER_S, bursts of ENGRAM_TENANT_EVENTS_BURST)
    gets 429 with Retry-After, nothing queued."""
    parsed = []
    first_of: dict[uuid.UUID, tuple[int, Event, bool]] = {}  # id → its first event
    for index, raw in enumerate(batch.events):
        given = raw.get("tenant_id")
        if given is not None and given != tenant:
            raise HTTPException(
                422,
                {
                    "message": "tenant_id must be the API key's tenant (or omitted)",
                    "fields": [f"events[{index}].tenant_id"],
                },
            )
        try:
            event = parse_event({**raw, "tenant_id": tenant})
        except EventValidationError as exc:
            raise HTTPException(
                422,
                {"message": str(exc), "fields": [f"events[{index}].{f}" for f in exc.fields]},
            ) from None
        _refuse_conflicting_duplicate(first_of, index, event, raw.get("timestamp") is not None)
        parsed.append(event)
    state = request.app.state.engram
    within_share(state.events_quota, tenant, len(parsed))
    try:
        receipts = state.producer.send_many(parsed)
    except (StreamFullError, NotReplicatedError) as exc:
        # Retryable: resend the batch (or the ids not in `accepted`); ids make it harmless.
        state.events_quota.give_back(tenant, len(parsed) - len(exc.sent))
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            {"message": str(exc), "accepted": [r.event_id for r in exc.sent]},
            headers={"Retry-After": "1"},
        ) from None
    except ProducerError as exc:
        state.events_quota.give_back(tenant, len(parsed))
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from None
    return {"accepted": len(receipts), "ids": [r.event_id for r in receipts]}


def _refuse_conflicting_duplicate(
    first_of: dict[uuid.UUID, tuple[int, Event, bool]], index: int, event: Event, timed: bool
) -> None:
    """An event id twice in one batch, as two different events: only the first would be
    stored though both were reported accepted, so the batch is refused, the later named."""
    first = conflicting_duplicate(first_of, index, event, timed)
    if first is not None:
        raise HTTPException(
            422,
            {
                "message": f"events[{index}] has the external_id of events[{first}] but other "
                "content: an event id names one event (send it once, or give each its own id)",
                "fields": [f"events[{index}].external_id"],
            },
        )
