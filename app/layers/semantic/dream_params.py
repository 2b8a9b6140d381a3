"""How the dream statements take their parameters: ids as one uuid[] constant, row sets as
one JSON document. Every statement is then one round trip with one plan whatever the batch,
and its rows are found by id lists passed as constants (see app/layers/semantic/dream.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Uuid
from sqlalchemy.dialects.postgresql import ARRAY

IDS = ARRAY(Uuid)


def as_json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(rows), default=str, ensure_ascii=False)
