"""The events producers send, validated before anything is written.

Every event gets an `event_id` that makes re-sending it harmless, and it is always derived,
never chosen by the client: from (tenant, user, external_id) when the producer gives its own
`external_id` (required for turns), otherwise from the event's canonical content (same event,
same timestamp → same id). Because the tenant is part of every id, no tenant can make its
event collide with another tenant's. A client may echo `event_id` back (a receipt's id); an
`event_id` that is not the derived one is refused.

An event accepted here must be storable by the consumer, or the client would be told
"accepted" about an event that can only be dead-lettered. So the door checks, in one place
(app/limits.py), what the workers and the database can store and read back:

- `timestamp` between 1970-01-01T00:00:00Z and 2200-01-01T00:00:00Z inclusive, after
  conversion to UTC (naive times are UTC);
- free-form JSON (`metadata`, `tool_run.arguments`, a raw event's `payload`) plain JSON nested
  at most 32 levels, within its byte cap; every other free-form field capped too
  (`iot_trigger.value` 4,096 characters, `tool_run.output` ENGRAM_MAX_CONTENT_BYTES);
- the whole serialized event within ENGRAM_MAX_EVENT_BYTES;
- no NUL character (Postgres text and jsonb cannot hold it) and no lone surrogate (not UTF-8)
  in any string; no NaN or Infinity in any number;
- identifiers (`tenant_id`, `user_id`) matched whole, a trailing newline included.
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
    StrictBool,
    StrictFloat,
    StrictStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.config import get_settings
from app.limits import RequestTimestamp, blank_problem, json_problem, text_problem

EVENT_NAMESPACE = uuid.UUID("6f1c2d4e-8a9b-4c3d-9e2f-0a1b2c3d4e5f")
KNOWN_TYPES = (
    "turn",
    "typing_start",
    "channel_switch",
    "iot_trigger",
    "presence_change",
    "tool_run",
)
# Pydantic's patterns match the whole text; Python code checks with `is_identifier`, because
# `re.match` lets `$` match before a final newline.
IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
Identifier = Annotated[str, Field(pattern=IDENTIFIER)]
Channel = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]+$")]
_IDENTIFIER = re.compile(IDENTIFIER)
_TYPE_PATTERN = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
MAX_IOT_VALUE_CHARS = 4096
IotText = Annotated[StrictStr, Field(max_length=MAX_IOT_VALUE_CHARS)]


def is_identifier(value: object) -> bool:
    """True when `value` is a whole tenant or user id (nothing before or after it)."""
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


class EventValidationError(ValueError):
    """An event that cannot be accepted; `fields` names every offending field."""

    def __init__(self, message: str, fields: list[str]) -> None:
        super().__init__(message)
        self.fields = fields


_NAMESPACE_BYTES = EVENT_NAMESPACE.bytes
# uuid5's version (5) and variant (RFC 4122) bits, set on the SHA-1 digest's first 16 bytes.
_VERSION_MASK = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_VERSION_BITS = (0x5000 << 64) | (0x8000 << 48)


def event_uuid(name: str) -> uuid.UUID:
    """uuid.uuid5(EVENT_NAMESPACE, name), without the stdlib's overhead (hot on ingest)."""
    digest = hashlib.sha1(_NAMESPACE_BYTES + name.encode(), usedforsecurity=False).digest()
    return uuid.UUID(int=(int.from_bytes(digest[:16]) & _VERSION_MASK) | _VERSION_BITS)


def _checked_json(value: dict[str, Any], field: str, max_bytes: int) -> dict[str, Any]:
    problem = json_problem(value, max_bytes=max_bytes)
    if problem:
        raise ValueError(f"{field} {problem}")
    return value


def _utf8_within(value: str, field: str, limit: int) -> str:
    # A UTF-8 character is at most 4 bytes: only long texts need encoding to be measured.
    if len(value) * 4 > limit and len(value.encode()) > limit:
        raise ValueError(f"{field} is larger than {limit} bytes")
    return value


class EventBase(BaseModel):
    """Fields every event has. Naive timestamps are taken as UTC; the limits every field
    must keep are those of the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    type: str
    tenant_id: Identifier
    user_id: Identifier
    event_id: uuid.UUID | None = None
    external_id: str | None = Field(default=None, min_length=1, max_length=256)
    timestamp: RequestTimestamp = Field(
        default_factory=lambda: datetime.now(UTC),
        description="when it happened: 1970-01-01T00:00:00Z to 2200-01-01T00:00:00Z",
    )
    channel: Channel | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unstorable_text(cls, data: Any) -> Any:
        if isinstance(data, dict):
            # Top-level strings; the JSON fields check their own (see _checked_json). Each bad
            # character is one code point, so the strings are searched at once first.
            texts = [value for value in data.values() if isinstance(value, str)]
            if not text_problem("".join(texts)):
                return data
            for key, value in data.items():
                problem = text_problem(value) if isinstance(value, str) else None
                if problem:
                    raise PydanticCustomError(
                        "unstorable_text", "{field} {problem}", {"field": key, "problem": problem}
                    )
        return data

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            return value
        return _checked_json(value, "metadata", get_settings().max_metadata_bytes)

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
        limit = get_settings().max_event_bytes
        if len(self.__pydantic_serializer__.to_json(self, exclude_none=True)) > limit:
            raise PydanticCustomError(
                "event_too_large",
                "the serialized event is larger than {limit} bytes",
                {"field": "<event>", "limit": limit},
            )
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
    agent_id: Identifier | None = Field(
        default=None,
        description="the agent that took part (recorded on the turn; memories extracted from "
        "it are that agent's private map)",
    )

    @field_validator("content")
    @classmethod
    def _content_limits(cls, value: str) -> str:
        return _utf8_within(value, "content", get_settings().max_content_bytes)

    @field_validator("speaker")
    @classmethod
    def _blank_speaker_is_none(cls, value: str | None) -> str | None:
        # A blank speaker ("", spaces, zero-width) names no one: kept, every rendering of the
        # turn read ": words" and speaker-name matching saw an empty name. The role shows.
        return None if value is None or blank_problem(value) else value


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
    # Strict members: lax parsing turned a numeric string too long for `str` into a float.
    value: StrictFloat | IotText | StrictBool | None = None


class PresenceChangeEvent(EventBase):
    type: Literal["presence_change"] = "presence_change"
    status: Literal["online", "away", "busy", "offline"]


class ToolRunEvent(EventBase):
    type: Literal["tool_run"] = "tool_run"
    tool: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Strict: the schema's boolean and number (lax parsing read "yes" as true, false as 0).
    success: StrictBool | None = None
    duration_ms: StrictFloat | None = Field(default=None, ge=0)
    output: str | None = None

    @field_validator("arguments")
    @classmethod
    def _arguments_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _checked_json(value, "arguments", get_settings().max_content_bytes)

    @field_validator("output")
    @classmethod
    def _output_limits(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return _utf8_within(value, "output", get_settings().max_content_bytes)


class GenericEvent(EventBase):
    """An event type Engram does not know yet: kept in L2 as a raw event, never dropped."""

    payload: dict[str, Any] = Field(default_factory=dict)

    @field_validator("type")
    @classmethod
    def _type_shape(cls, value: str) -> str:
        if not _TYPE_PATTERN.fullmatch(value):
            raise ValueError("type must be a lowercase name like 'sensor.reading'")
        if value in KNOWN_TYPES:
            raise ValueError(f"type {value!r} is a known type")
        return value

    @field_validator("payload")
    @classmethod
    def _payload_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _checked_json(value, "payload", get_settings().max_content_bytes)


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
_UNION_MEMBER = re.compile(r"(str|int|float|bool|none|constrained-\w+|function-.*|\w+\[.*\])")


def _as_error(exc: ValidationError, *, tagged: bool) -> EventValidationError:
    """Name each offending field once (the discriminated union prefixes locations with the
    tag; a union field adds the member tried, e.g. `value.float`, which is no field)."""
    fields: list[str] = []
    details: list[str] = []
    for err in exc.errors():
        loc = err["loc"][1:] if tagged else err["loc"]
        parts = [str(p) for i, p in enumerate(loc) if i == 0 or not _UNION_MEMBER.fullmatch(str(p))]
        ctx = err.get("ctx") or {}
        name = ".".join(parts) or str(ctx.get("field", "<event>"))
        if name not in fields:
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
            return _known.validate_python(data)
        return GenericEvent.model_validate(data)
    except ValidationError as exc:
        raise _as_error(exc, tagged=tagged) from None


def parse_event_json(raw: str | bytes) -> Event:
    try:
        data = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise EventValidationError(f"invalid event: not JSON ({exc})", ["<event>"]) from None
    return parse_event(data)


def conflicting_duplicate(
    first_of: dict[uuid.UUID, tuple[int, Event, bool]], index: int, event: Event, timed: bool
) -> int | None:
    """The index of the batch's earlier event with this event's id when the two differ, else
    None; `first_of` collects each id's first (index, event, whether it gave a time). The same
    event sent twice is a harmless resend; events are compared as parsed (`"metadata": {}` is
    no metadata), their times only when both gave one (an omitted time is the arrival's)."""
    first, earlier, earlier_timed = first_of.setdefault(event.id, (index, event, timed))
    if first == index:
        return None
    unset = {"timestamp", "event_id"}
    same = earlier.model_dump(exclude=unset) == event.model_dump(exclude=unset) and (
        earlier_timed == timed and (not timed or earlier.timestamp == event.timestamp)
    )
    return None if same else first
