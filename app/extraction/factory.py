"""Settings → extractor: the offline rules by default, a chat model when configured."""

from __future__ import annotations

from app.config import Settings
from app.extraction.base import Extractor
from app.extraction.llm import LLMExtractor
from app.extraction.offline import OfflineExtractor


def get_extractor(settings: Settings) -> Extractor:
    """`extractor_backend`: "offline" (deterministic rules) or "llm" (falls back to them)."""
    if settings.extractor_backend == "llm":
        return LLMExtractor.from_settings(settings)
    return OfflineExtractor(max_chars=settings.extract_max_chars)
