"""Gems from any OpenAI-compatible `/chat/completions` endpoint, checked, with a safe fallback.

The model gets the batch turns (with their ids) and a token-capped slice of earlier context,
and must answer JSON following GEM_SCHEMA. Server errors, timeouts, invalid JSON and a reply
of the wrong shape are retried with exponential backoff; every gem is then validated (kind,
importance in [0, 1], cited ids must be batch turns; a gem citing anything else is dropped).
When the model still fails, the batch is extracted by the offline rules instead, so a batch
never fails because a model did: each gem's `metadata["extractor"]` says which one made it.

Stdlib HTTP through app/http_json.py (shared with the embedding client).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.config import Settings
from app.extraction.base import GEM_KINDS, Extractor, Gem, SourceTurn
from app.extraction.offline import DEFAULT_MAX_CHARS, OfflineExtractor, display_name
from app.extraction.prompt import GEM_SCHEMA, build_messages
from app.extraction.salience import summarize
from app.extraction.sentences import clean_turn, split_sentences
from app.http_json import (
    InvalidJSONReply,
    RefusedHTTPError,
    RetryableHTTPError,
    backoff_delay,
    endpoint,
    post_json,
)
from app.text.injection import SUSPECTED_INSTRUCTION, instruction_flags

_log = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 4000


class LLMExtractionError(Exception):
    """The endpoint could not give a usable answer (after retries, or refused outright)."""


_RetryableError = RetryableHTTPError  # also raised for replies of the wrong shape


class _NoResponseFormatError(Exception):
    """The server refused `response_format`: ask again without it."""


class LLMExtractor:
    """Chat-model extraction; `fallback` (offline rules by default) runs when it fails."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        context_tokens: int = 2000,
        max_chars: int = DEFAULT_MAX_CHARS,
        fallback: Extractor | None = None,
    ) -> None:
        self.url = endpoint(base_url, "/chat/completions")
        self.model = model
        self.name = f"llm:{model}"
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.context_tokens = context_tokens
        self.max_chars = max_chars
        self.fallback: Extractor = fallback or OfflineExtractor(max_chars=max_chars)
        self.use_response_format = True
        self._api_key = api_key

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMExtractor:
        key = settings.llm_api_key
        return cls(
            settings.llm_base_url,
            settings.llm_model,
            api_key=key.get_secret_value() if key else None,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            context_tokens=settings.extract_context_tokens,
            max_chars=settings.extract_max_chars,
        )

    def extract(self, *, batch: Sequence[SourceTurn], context: Sequence[SourceTurn]) -> list[Gem]:
        if not batch:
            return []
        try:
            return self._extract(batch, context)
        except Exception as exc:  # whatever went wrong, the batch still gets its memories
            _log.warning("LLM extraction failed, using %s: %s", self.fallback.name, exc)
            gems = self.fallback.extract(batch=batch, context=context)
            for gem in gems:
                gem.metadata["extractor"] = self.fallback.name
                gem.metadata["fallback_from"] = self.name
                gem.metadata["llm_error"] = f"{type(exc).__name__}: {exc}"[:300]
            return gems

    # -- the request ---------------------------------------------------------------------

    def _extract(self, batch: Sequence[SourceTurn], context: Sequence[SourceTurn]) -> list[Gem]:
        messages = build_messages(
            batch, context, context_tokens=self.context_tokens, max_chars=self.max_chars
        )
        attempts = self.max_retries + 1
        attempt = 0
        while True:
            body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0}
            if self.use_response_format:
                body["response_format"] = {"type": "json_object"}
            try:
                reply = self._post(body)
                items = parse_reply(reply)
            except _NoResponseFormatError:
                self.use_response_format = False  # not an attempt: the same question, plainer
                continue
            except _RetryableError as exc:
                attempt += 1
                if attempt >= attempts:
                    raise LLMExtractionError(
                        f"{self.url} failed {attempts} times; last: {exc}"
                    ) from exc
                self._sleep(attempt, exc.retry_after_s, exc)
                continue
            return self._validated(items, batch)

    def _sleep(self, attempt: int, retry_after_s: float | None, exc: Exception) -> None:
        delay = backoff_delay(attempt - 1, self.backoff_s, retry_after_s)
        _log.warning("LLM extraction attempt failed (%s); retry in %.2fs", exc, delay)
        time.sleep(delay)

    def _post(self, body: dict[str, Any]) -> Any:
        try:
            return post_json(self.url, body, api_key=self._api_key, timeout_s=self.timeout_s)
        except RefusedHTTPError as exc:
            if exc.status == 400 and self.use_response_format and "response_format" in exc.detail:
                raise _NoResponseFormatError(exc.detail) from exc
            raise LLMExtractionError(f"{self.url} refused: {exc}") from exc
        except InvalidJSONReply as exc:
            raise _RetryableError(str(exc)) from exc

    # -- the answer ----------------------------------------------------------------------

    def _validated(self, items: list[Any], batch: Sequence[SourceTurn]) -> list[Gem]:
        turns = {turn.id: turn for turn in batch}
        gems: list[Gem] = []
        for position, item in enumerate(items):
            gem = self._gem(item, turns)
            if gem is None:
                _log.info("LLM gem %d dropped: fails validation: %.200r", position, item)
                continue
            gems.append(gem)
        # Two gems from one sentence would share its vector and read as near-duplicates:
        # those are embedded from their contents.
        shared = Counter(g.embed_text for g in gems if g.embed_text)
        return [replace(g, embed_text="") if shared[g.embed_text] > 1 else g for g in gems]

    def _gem(self, item: Any, turns: dict[str, SourceTurn]) -> Gem | None:
        """A checked Gem, or None when the item breaks a rule (kind, importance, ids, text)."""
        if not isinstance(item, dict):
            return None
        kind, content, weight = item.get("kind"), item.get("content"), item.get("importance")
        ids = item.get("source_turn_ids")
        if kind not in GEM_KINDS or not isinstance(content, str) or not content.strip():
            return None
        if type(weight) not in (int, float) or not math.isfinite(weight) or not 0 <= weight <= 1:
            return None
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            return None
        if any(i not in turns for i in ids):
            return None  # a cited turn outside the batch is a hallucinated provenance
        cited = [turns[i] for i in dict.fromkeys(ids)]
        first = cited[0]
        content = " ".join(content.split())[:MAX_CONTENT_CHARS]
        summary = item.get("summary")
        subject, value = _text_or_none(item.get("subject")), _text_or_none(item.get("value"))
        if subject is None:
            value = None
        original = item.get("original")
        said = " ".join(original.split()) if isinstance(original, str) else ""
        # Like the offline extractor's sentence gems, embedded from the sentence as said, but
        # only when it is a whole sentence of a cited turn (a model can paraphrase its
        # "original", or give a fragment).
        verbatim = (
            said if said and any(said in _sentences(t, self.max_chars) for t in cited) else ""
        )
        source_text, truncated = clean_turn(first.content, self.max_chars)
        metadata: dict[str, object] = {
            "extractor": self.name,
            "speaker": display_name(first),
            "role": first.role,
            "channel": first.channel,
        }
        if truncated:
            metadata["truncated"] = True
        if any(instruction_flags(turn.content[: self.max_chars]) for turn in cited):
            metadata[SUSPECTED_INSTRUCTION] = True
        return Gem(
            kind=kind,
            content=content,
            summary=summarize(summary if isinstance(summary, str) and summary.strip() else content),
            topics=_topics(item.get("topics")),
            importance=round(float(weight), 3),
            source_turn_ids=[turn.id for turn in cited],
            occurred_at=first.at,
            original=original if isinstance(original, str) and original.strip() else source_text,
            subject=subject.lower() if subject else None,
            value=value.lower() if value else None,
            metadata=metadata,
            embed_text=verbatim,
        )


def _sentences(turn: SourceTurn, max_chars: int) -> list[str]:
    return split_sentences(clean_turn(turn.content, max_chars)[0])


def parse_reply(reply: Any) -> list[Any]:
    """The gem list from a chat completion; _RetryableError when it is not there or not JSON."""
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise _RetryableError(
            f"reply has no choices[0].message.content: {str(reply)[:200]}"
        ) from exc
    if not isinstance(content, str):
        raise _RetryableError("message content is not text")
    text = content.strip()
    if text.startswith("```"):  # some servers fence JSON even in JSON mode
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _RetryableError(f"message is not JSON: {text[:200]!r}") from exc
    gems = data.get("gems") if isinstance(data, dict) else data
    if not isinstance(gems, list):
        raise _RetryableError(
            f"message does not follow the schema (no `gems` list): {text[:200]!r}"
        )
    return gems


def _text_or_none(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return " ".join(value.split())[:200]


def _topics(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    found = [" ".join(t.lower().split())[:60] for t in value if isinstance(t, str) and t.strip()]
    return list(dict.fromkeys(found))[:5]


__all__ = ["GEM_SCHEMA", "LLMExtractionError", "LLMExtractor", "parse_reply"]
