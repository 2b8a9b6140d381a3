"""ENGRAM_EMBEDDING_DIM is refused at start-up past what a memory row holds, saying how to
use a bigger model, instead of failing in a migration or a worker's INSERT."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import MAX_EMBEDDING_DIM, Settings


def test_the_widest_dimension_is_accepted() -> None:
    assert Settings(embedding_dim=MAX_EMBEDDING_DIM).embedding_dim == MAX_EMBEDDING_DIM


@pytest.mark.parametrize("dim", [MAX_EMBEDDING_DIM + 1, 2000, 3072, 16_000])
def test_a_wider_dimension_is_refused_with_the_way_out(dim: int) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(embedding_dim=dim)
    message = str(caught.value)
    assert f"ENGRAM_EMBEDDING_DIM={dim}" in message
    assert "ENGRAM_EMBEDDING_REQUEST_DIM=true" in message
