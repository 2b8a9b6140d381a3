"""L2 upkeep: summarise closed sessions, and apply the retention policy to raw events.

* Summaries are offline and deterministic (same turns, same summary): the session's opening
  request, then its key lines — decisions first, then to-dos, preferences, goals, events and
  facts, as the offline extractor classifies sentences — in the order they were said, within
  a bounded length; topics are the session's keyphrases. One UPDATE per batch of sessions.
* Retention deletes raw events (episodic.events: typing, presence, sensors, tool runs,
  unknown types) older than `event_retention_days`: first whole day partitions past the
  cutoff (once, for every tenant; partitions ahead are made in the same step), then the
  rest in bounded batches. Turns are the immutable trace and are never deleted.

Both run tenant by tenant under `run_job`, each batch in its own transaction scoped to the
tenant by row-level security; re-running either changes nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from app.config import Settings
from app.db.session import app_engine, unit_of_work
from app.extraction.base import SourceTurn
from app.extraction.classify import classify, is_small_talk
from app.extraction.offline import display_name
from app.extraction.salience import summarize, topics, word_counts
from app.extraction.sentences import clean_turn, looks_like_junk, split_segments
from app.layers.episodic import retention as repository
from app.layers.episodic.service import close_idle_sessions
from app.layers.working.summary import first_sentence
from app.services.jobs import JobRun, drain, each_tenant
from app.services.partitions import keep_day_partitions
from app.text.injection import instruction_flags

_log = logging.getLogger(__name__)

SUMMARY_JOB = "episodic.summaries"
RETENTION_JOB = "episodic.retention"
SUMMARY_BATCH = 50  # sessions per transaction
SUMMARY_TURNS = 50  # first and last turns of a session read for its summary
TURN_CHARS = 2000  # of each turn's text
EVENT_BATCH = 50_000  # events deleted per transaction

MAX_KEY_LINES = 6
LINE_CHARS = 200
SUMMARY_CHARS = 1200
KEY_KINDS = ("decision", "todo", "preference", "goal", "event", "fact")
_ROLES = ("user", "assistant")
_SQUEEZE = re.compile(r"[\W_]+")


@dataclass(frozen=True)
class _Line:
    kind: str
    speaker: str
    text: str
    position: int

    def render(self) -> str:
        label = "Request" if self.kind == "request" else self.kind.capitalize()
        return f"{label} ({self.speaker}): {summarize(self.text, LINE_CHARS)}"


def session_summary(turns: Sequence[SourceTurn]) -> tuple[str, list[str]]:
    """(summary, topics) of one session's turns, oldest first; ("", []) with nothing said.

    Sentences that read like instructions to a model are left out: the turns keep them (as
    flagged data), a derived summary does not repeat them."""
    request: _Line | None = None
    keys: list[_Line] = []
    prose: list[str] = []
    names: set[str] = set()
    seen: set[str] = set()
    opening: str | None = None
    position = 0
    for turn in turns:
        if turn.role not in _ROLES:
            continue
        text, _ = clean_turn(turn.content, TURN_CHARS)
        if looks_like_junk(text):
            continue
        speaker = display_name(turn)
        if turn.speaker and speaker == " ".join(turn.speaker.split()):
            names.add(speaker)
        for segment in split_segments(text):
            if segment.is_code or instruction_flags(segment.text):
                continue
            sentence = segment.text
            position += 1
            if opening is None:
                opening = f"{speaker}: {first_sentence(sentence)}"
            if is_small_talk(sentence, role=turn.role):
                continue
            prose.append(sentence)
            key = _SQUEEZE.sub(" ", sentence.casefold()).strip()
            if key in seen:
                continue
            if request is None and turn.role == "user":
                request = _Line("request", speaker, sentence, position)
                seen.add(key)
                continue
            kind = classify(sentence, role=turn.role)
            if kind in KEY_KINDS:
                keys.append(_Line(kind, speaker, sentence, position))
                seen.add(key)
    lines = _pick(request, keys)
    if not lines:  # small talk only: its first sentence says what the session was
        if opening is None:
            return "", []
        lines = [opening]
    counts = word_counts(prose)
    return "\n".join(lines), topics(". ".join(prose), exclude=sorted(names), counts=counts)


def _pick(request: _Line | None, keys: list[_Line]) -> list[str]:
    """The request, then the most important key lines in the order they were said, within
    MAX_KEY_LINES and SUMMARY_CHARS."""
    ranked = sorted(keys, key=lambda line: (KEY_KINDS.index(line.kind), line.position))
    chosen = sorted(ranked[:MAX_KEY_LINES], key=lambda line: line.position)
    lines = ([request] if request else []) + chosen
    rendered = [line.render() for line in lines]
    while len(rendered) > 1 and sum(len(r) + 1 for r in rendered) - 1 > SUMMARY_CHARS:
        drop = max(chosen, key=lambda line: (KEY_KINDS.index(line.kind), line.position))
        chosen.remove(drop)
        rendered.pop(lines.index(drop))
        lines.remove(drop)
    return rendered


def _source_turn(row: Any) -> SourceTurn:
    return SourceTurn(
        id=str(row.id),
        external_id=row.external_id,
        role=row.role,
        speaker=row.speaker or "",
        content=row.content,
        channel=row.channel,
        at=row.occurred_at,
    )


def summarise_closed_sessions(
    settings: Settings, now: datetime | None = None, *, batch: int = SUMMARY_BATCH
) -> int:
    """Attach a summary and topics to every closed session that has none; returns how many
    sessions were written. Open sessions are left alone (they may still grow)."""

    def summarise(tenant_id: str, run: JobRun) -> None:
        after = None
        while True:
            with unit_of_work(tenant_id, engine=app_engine(settings), all_agents=True) as session:
                ids = repository.unsummarised_sessions(
                    session=session, tenant_id=tenant_id, after=after, limit=batch
                )
                rows = repository.summary_turns(
                    session=session,
                    tenant_id=tenant_id,
                    session_ids=ids,
                    per_session=SUMMARY_TURNS,
                    chars=TURN_CHARS,
                )
                by_session: dict[Any, list[SourceTurn]] = {sid: [] for sid in ids}
                for row in rows:
                    by_session[row.session_id].append(_source_turn(row))
                summaries = []
                for sid, turns in by_session.items():
                    summary, found = session_summary(turns)
                    summaries.append({"id": str(sid), "summary": summary, "topics": found})
                run.rows += repository.save_summaries(
                    session=session, tenant_id=tenant_id, rows=summaries
                )
            if len(ids) < batch:
                return
            after = ids[-1]

    return each_tenant(SUMMARY_JOB, settings, now or datetime.now(UTC), summarise)


def close_and_summarise(settings: Settings, now: datetime | None = None) -> dict[str, int]:
    """Close the sessions idle past the timeout, then summarise every closed one."""
    closed = close_idle_sessions(settings, now=now)
    return {"closed": closed, "summarised": summarise_closed_sessions(settings, now)}


def apply_event_retention(
    settings: Settings, now: datetime | None = None, *, batch: int = EVENT_BATCH
) -> int:
    """Delete raw events that occurred more than `event_retention_days` before `now`, at
    most `batch` per transaction; returns how many went. Turns are kept."""
    now = now or datetime.now(UTC)
    before = now - timedelta(days=settings.event_retention_days)
    keep_day_partitions(settings, repository.EVENT_PARTITIONS, keep_from=before, now=now)

    def expire(tenant_id: str, run: JobRun) -> None:
        run.detail["before"] = before.isoformat()
        drain(
            settings,
            tenant_id,
            run,
            batch,
            lambda session: repository.delete_events_before(
                session=session, tenant_id=tenant_id, before=before, limit=batch
            ),
        )

    return each_tenant(RETENTION_JOB, settings, now, expire)
