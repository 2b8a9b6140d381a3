"""The schema of one item of POST /v1/events, for the OpenAPI document.

The door parses each item itself (app/streams/events.py: the event's `type` picks its model,
an unknown type is kept as a raw event), so the body is declared as plain objects and
pydantic prints nothing of the event models. This is their schema as the API takes them:
one variant per known type and one for the rest, every top-level string storable, free-form
JSON as `StorableJson`, times as app/limits.py reads them. `tenant_id` and `event_id` are
left out: one must be the key's tenant, the other the id Engram derives, which no schema
can state (both may still be sent, as the item's description says). Cross-item rules (one
external id, one event) and byte caps stay the door's.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from pydantic import BaseModel, TypeAdapter

from app.declared import STORABLE_PATTERN
from app.limits import RequestTimestamp
from app.streams.events import (
    KNOWN_TYPES,
    ChannelSwitchEvent,
    GenericEvent,
    IotTriggerEvent,
    PresenceChangeEvent,
    ToolRunEvent,
    TurnEvent,
    TypingStartEvent,
)

JSON_REF = {"$ref": "#/components/schemas/StorableJson"}
_MODELS: tuple[type[BaseModel], ...] = (
    TurnEvent,
    TypingStartEvent,
    ChannelSwitchEvent,
    IotTriggerEvent,
    PresenceChangeEvent,
    ToolRunEvent,
    GenericEvent,
)
_FREE_FORM = ("metadata", "payload", "arguments")


def _storable(schema: dict[str, Any]) -> None:
    """The string schemas of one property (itself or its anyOf members) without a pattern
    get the storable one."""
    for member in [schema, *schema.get("anyOf", [])]:
        if member.get("type") == "string" and not {"pattern", "const", "enum"} & member.keys():
            member["pattern"] = STORABLE_PATTERN


def _time() -> dict[str, Any]:
    return TypeAdapter(RequestTimestamp).json_schema()


def _variant(model: type[BaseModel]) -> dict[str, Any]:
    schema = copy.deepcopy(model.model_json_schema())
    properties: dict[str, Any] = schema["properties"]
    properties.pop("event_id", None)
    properties.pop("tenant_id", None)
    for name, field in properties.items():
        if name in _FREE_FORM:
            properties[name] = {
                "type": "object",
                "additionalProperties": JSON_REF,
                "propertyNames": {"pattern": STORABLE_PATTERN},
            }
        elif name == "timestamp":
            properties[name] = {**_time(), "description": field.get("description", "")}
        else:
            _storable(field)
    if model is GenericEvent:
        properties["type"] = {
            "type": "string",
            "pattern": r"^[a-z][a-z0-9_.-]{0,63}$",
            "not": {"enum": list(KNOWN_TYPES)},
            "description": "a type Engram does not know: kept as a raw event",
        }
    required = [name for name in schema.get("required", []) if name in properties]
    return {
        "type": "object",
        "title": model.__name__,
        "properties": properties,
        "required": sorted({*required, "type", "user_id"}),
        "additionalProperties": False,
    }


@cache
def _variants() -> tuple[dict[str, Any], ...]:
    return tuple(_variant(model) for model in _MODELS)


def event_item_schema() -> dict[str, Any]:
    """One of the event variants (each names its `type`); a copy, for the caller to keep."""
    return {
        "oneOf": copy.deepcopy(list(_variants())),
        "description": "an event; its tenant is the API key's (a `tenant_id` other than the"
        " key's is refused), and `event_id`, when echoed from a receipt, must be that id",
    }
