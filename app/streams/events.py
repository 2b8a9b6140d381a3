"""The events producers send, validated before anything is written.

Every event gets an `event_id` that makes re-sending it harmless, and it is always derived,
never chosen by the client: from (tenant, user, external_id) when the producer gives its own
`external_id` (required for turns), otherwise from the event's canonical content (same event,
same timestamp → same id). Because the tenant is part of every id, no tenant can make its
event collide with another tenant's. A client may echo `event_id` back (a receipt's id); an
`event_id` that is not the derived one is refused.

Postgres text and jsonb cannot hold NUL characters, so a NUL anywhere in an event is refused
here rather than discovered by the consumer, where the event could only be dead-lettered.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.config import get_settings

EVENT_NAMESPACE = uuid.UUID("6f1c2d4e-8a9b-4c3d-9e2f-0a1b2c3d4e5f")
KNOWN_TYPES = (
    "turn",
    "typing_start",
    "channel_switch",
    "iot_trigger",
    "presence_change",
    "tool_run",
)
IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
Identifier = Annotated[str, Field(pattern=IDENTIFIER)]
Channel = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$")]
_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


class EventValidationError(ValueError):
    """An event that cannot be accepted; `fields` names every offending field."""

    def __init__(self, message: str, fields: list[str]) -> None:
        super().__init__(message)
        self.fields = fields


_NAMESPACE_BYTES = EVENT_NAMESPACE.bytes


def event_uuid(name: str) -> uuid.UUID:
    """uuid.uuid5(EVENT_NAMESPACE, name), without the stdlib's overhead (hot on ingest)."""
    digest = bytearray(
        hashlib.sha1(_NAMESPACE_BYTES + name.encode(), usedforsecurity=False).digest()[:16]
    )
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return uuid.UUID(bytes=bytes(digest))


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _find_nul(value: Any, path: str) -> str | None:
    """Path of the first string (or key) holding a NUL character, or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                return path
            found = _find_nul(item, path)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for item in value:
            found = _find_nul(item, path)
            if found:
                return found
    return None


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


class EventBase(BaseModel):
    """Fields every event has. Naive timestamps are taken as UTC."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    tenant_id: Identifier
    user_id: Identifier
    event_id: uuid.UUID | None = None
    external_id: str | None = Field(default=None, min_length=1, max_length=256)
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))
    channel: Channel | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _refuse_nul(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, value in data.items():
                if type(value) is str:
                    if "\x00" not in value:
                        continue
                elif not isinstance(value, dict | list) or not _find_nul(value, key):
                    continue
                raise PydanticCustomError(
                    "nul_character",
                    "{field} must not contain NUL characters",
                    {"field": key},
                )
        return data

    @field_validator("timestamp")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return _utc(value)

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            return value
        limit = get_settings().max_metadata_bytes
        if _json_size(value) > limit:
            raise ValueError(f"metadata is larger than {limit} bytes of JSON")
        return value

    @model_validator(mode="after")
    def _assign_id(self) -> EventBase:
        derived = self.derive_id()
        if self.event_id is not None and self.event_id != derived:
            raise PydanticCustomError(
                "event_id_mismatch",
                "{field} is derived by Engram (from external_id or the content); "
                "omit it, or send the id a receipt returned",
                {"field": "event_id"},
            )
        object.__setattr__(self, "event_id", derived)
        return self

    def derive_id(self) -> uuid.UUID:
        if self.external_id is not None:
            return event_uuid(
                f"{self.type}\x1f{self.tenant_id}\x1f{self.user_id}\x1f{self.external_id}"
            )
        body = self.model_dump(mode="json", exclude={"event_id"})
        return event_uuid(json.dumps(body, sort_keys=True, ensure_ascii=False))

    @property
    def id(self) -> uuid.UUID:
        assert self.event_id is not None
        return self.event_id

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)


class TurnEvent(EventBase):
    """One message of a conversation; `external_id` is the producer's own message id."""

    type: Literal["turn"] = "turn"
    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(min_length=1)
    external_id: str = Field(min_length=1, max_length=256)
    channel: Channel = "default"
    speaker: str | None = Field(default=None, max_length=128)

    @field_validator("content")
    @classmethod
    def _content_limits(cls, value: str) -> str:
        limit = get_settings().max_content_bytes
        # A UTF-8 character is at most 4 bytes: only long texts need encoding to be measured.
        if len(value) * 4 > limit and len(value.encode()) > limit:
            raise ValueError(f"content is larger than {limit} bytes")
        return value


class TypingStartEvent(EventBase):
    type: Literal["typing_start"] = "typing_start"


class ChannelSwitchEvent(EventBase):
    type: Literal["channel_switch"] = "channel_switch"
    from_channel: Channel | None = None
    channel: Channel


class IotTriggerEvent(EventBase):
    type: Literal["iot_trigger"] = "iot_trigger"
    device_id: str = Field(min_length=1, max_length=256)
    trigger: str = Field(min_length=1, max_length=256)
    value: float | str | bool | None = None


class PresenceChangeEvent(EventBase):
    type: Literal["presence_change"] = "presence_change"
    status: Literal["online", "away", "busy", "offline"]


class ToolRunEvent(EventBase):
    type: Literal["tool_run"] = "tool_run"
    tool: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)
    success: bool | None = None
    duration_ms: float | None = Field(default=None, ge=0)
    output: str | None = Field(default=None, max_length=64_000)


class GenericEvent(EventBase):
    """An event type Engram does not know yet: kept in L2 as a raw event, never dropped."""

    payload: dict[str, Any] = Field(default_factory=dict)

    @field_validator("type")
    @classmethod
    def _type_shape(cls, value: str) -> str:
        if not _TYPE_PATTERN.match(value):
            raise ValueError("type must be a lowercase name like 'sensor.reading'")
        if value in KNOWN_TYPES:
            raise ValueError(f"type {value!r} is a known type")
        return value

    @field_validator("payload")
    @classmethod
    def _payload_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        limit = get_settings().max_content_bytes
        if _json_size(value) > limit:
            raise ValueError(f"payload is larger than {limit} bytes of JSON")
        return value


KnownEvent = Annotated[
    TurnEvent
    | TypingStartEvent
    | ChannelSwitchEvent
    | IotTriggerEvent
    | PresenceChangeEvent
    | ToolRunEvent,
    Field(discriminator="type"),
]
Event = (
    TurnEvent
    | TypingStartEvent
    | ChannelSwitchEvent
    | IotTriggerEvent
    | PresenceChangeEvent
    | ToolRunEvent
    | GenericEvent
)
_known = TypeAdapter(KnownEvent)


def _as_error(exc: ValidationError, *, tagged: bool) -> EventValidationError:
    """Name each offending field (the discriminated union prefixes locations with the tag)."""
    fields: list[str] = []
    details: list[str] = []
    for err in exc.errors():
        loc = err["loc"][1:] if tagged else err["loc"]
        ctx = err.get("ctx") or {}
        name = ".".join(str(part) for part in loc) or str(ctx.get("field", "<event>"))
        fields.append(name)
        details.append(f"{name}: {err['msg']}")
    return EventValidationError("invalid event: " + "; ".join(details), fields)


def parse_event(data: dict[str, Any] | EventBase) -> Event:
    """Validate one event from a mapping (or pass a model through); raises EventValidationError."""
    if isinstance(data, EventBase):
        return data  # type: ignore[return-value]
    if not isinstance(data, dict):
        raise EventValidationError("invalid event: an event must be a JSON object", ["<event>"])
    kind = data.get("type")
    if not isinstance(kind, str):
        raise EventValidationError("invalid event: type: field required (a string)", ["type"])
    tagged = kind in KNOWN_TYPES
    try:
        if tagged:
            return _known.validate_python(data)  # type: ignore[no-any-return]
        return GenericEvent.model_validate(data)
    except ValidationError as exc:
        raise _as_error(exc, tagged=tagged) from None


def parse_event_json(raw: str | bytes) -> Event:
    try:
        data = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise EventValidationError(f"invalid event: not JSON ({exc})", ["<event>"]) from None
    return parse_event(data)
