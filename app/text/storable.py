"""Request fields that Postgres can store: no NUL characters in text, JSON without NaN.

Postgres text and jsonb refuse NUL, and jsonb refuses NaN/Infinity; checked at the edge, the
caller gets a 422 naming the field instead of a failed transaction deep inside a service.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, Field


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _storable_json(value: Any) -> Any:
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"must be plain JSON without NaN or Infinity ({exc})") from None
    if "\\u0000" in encoded:
        raise ValueError("must not contain NUL characters")
    return value


StorableText = Annotated[str, AfterValidator(_no_nul)]
# A label on a memory (tags, topics) as requests give it.
StorableTag = Annotated[StorableText, Field(min_length=1, max_length=64)]
StorableJson = Annotated[dict[str, Any], AfterValidator(_storable_json)]
StorableStep = Annotated[str | dict[str, Any], AfterValidator(_storable_json)]
