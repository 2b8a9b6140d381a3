"""Request fields that Postgres can store: text without NUL characters or lone surrogates.

Postgres text refuses NUL and UTF-8 cannot carry a lone surrogate; checked at the edge, the
caller gets a 422 naming the field instead of a failed transaction deep inside a service.
The rules themselves live in app/limits.py, shared with the event model.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from app.declared import STORABLE
from app.limits import text_problem


def _storable_text(value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


StorableText = Annotated[str, AfterValidator(_storable_text), STORABLE]
# A label on a memory (tags, topics) as requests give it.
StorableTag = Annotated[StorableText, Field(min_length=1, max_length=64)]
