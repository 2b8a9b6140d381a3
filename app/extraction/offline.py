"""The rules-only extractor: deterministic, offline, and the fallback of every other one.

Per batch turn (user and assistant roles; system and tool turns carry no memories): cap the
text at `max_chars`, drop junk, split into sentences and whole code blocks, skip small talk
(app/extraction/smalltalk.py: greetings, thanks, reactions, with names, emoji and laughter),
classify (app/extraction/classify.py), resolve times and persons so each gem stands alone,
then add topics, importance and, on preferences and decisions, subject/value keys
(app/extraction/slots.py). A verbless answer ("Twelve people, the week of March 9.") is
merged with the question it answers, citing both turns, the answer first, only when it
answers it (classify.answers); otherwise it stands alone and the question gives nothing.
A plain remark that only echoes the other person's last turn ("Risotto sounds delicious!")
gives nothing: their turn holds the fact. A turn's plain fact sentences become passages
(`passages`), not one memory each. Identical sentences in a batch become one gem citing
every turn that said them.

Turn text is data: text that reads like instructions is extracted like any other and its
gems carry `suspected_instruction: true` (app/text/injection.py); nothing in it changes
what the extractor does.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.extraction.base import Gem, SourceTurn
from app.extraction.classify import answers, classify, is_fragment
from app.extraction.persons import resolve_persons
from app.extraction.salience import importance, summarize, topics, word_counts
from app.extraction.sentences import Segment, clean_turn, looks_like_junk, split_segments
from app.extraction.slots import subject_value
from app.extraction.smalltalk import heard_words, is_echo
from app.extraction.timeref import resolve_times
from app.text.injection import SUSPECTED_INSTRUCTION, instruction_flags
from app.text.passages import key_text

_log = logging.getLogger(__name__)

NAME = "offline-rules-v1"
DEFAULT_MAX_CHARS = 8000
PASSAGE_CHARS = 600  # a passage of fact sentences: a few sentences, well inside one vector
_ROLES = ("user", "assistant")
_CODE_NAMES = re.compile(r"\b(?:def|class|function|fn|func|interface|struct)\s+([A-Za-z_]\w*)")
_DEDUPE = re.compile(r"[\W_]+")


@dataclass
class _Draft:
    """A gem before batch-level scoring (topics need the whole batch's word counts)."""

    kind: str
    content: str
    original: str
    turn: SourceTurn
    speaker: str
    listener: str
    source_ids: list[str]
    truncated: bool = False
    suspicious: bool = False
    dates: list[str] = field(default_factory=list)
    summary: str = ""
    extra_topics: list[str] = field(default_factory=list)
    embed_text: str = ""  # the sentence as said, for a gem that is one sentence of a turn
    embed_parts: list[str] = field(default_factory=list)  # the sentences of a joined passage


@dataclass(frozen=True)
class _Question:
    """The last question of the previous turn, for merging a fragment answer with it."""

    content: str
    turn: SourceTurn
    in_batch: bool


class OfflineExtractor:
    """Rules and cue-word statistics; no model, no network, same output for the same input."""

    name = NAME

    def __init__(self, *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_chars = max_chars

    def extract(self, *, batch: Sequence[SourceTurn], context: Sequence[SourceTurn]) -> list[Gem]:
        timeline = [*context, *batch]
        drafts: dict[str, _Draft] = {}
        question = self._question_of(context[-1], timeline, in_batch=False) if context else None
        for turn in batch:
            try:
                found = self.turn_drafts(turn, timeline=timeline, question=question)
                question = self._question_of(turn, timeline, in_batch=True)
            except Exception:  # one odd turn must not cost the batch its other memories
                _log.exception("offline extraction skipped turn %s", turn.id)
                found, question = [], None
            for draft in found:
                key = _DEDUPE.sub(" ", draft.content.casefold()).strip()
                kept = drafts.setdefault(key, draft)
                if kept is not draft:
                    kept.source_ids += [i for i in draft.source_ids if i not in kept.source_ids]
        counts = word_counts(d.content for d in drafts.values())
        return [self._gem(draft, counts) for draft in drafts.values()]

    # -- one turn ------------------------------------------------------------------------

    def turn_drafts(
        self,
        turn: SourceTurn,
        *,
        timeline: Sequence[SourceTurn],
        question: _Question | None = None,
    ) -> list[_Draft]:
        """Drafts from one turn; `timeline` (context + batch) only tells who is speaking."""
        if turn.role not in _ROLES or not isinstance(turn.content, str):
            return []
        text, truncated = clean_turn(turn.content, self.max_chars)
        if looks_like_junk(text):
            return []
        speaker, listener = display_name(turn), listener_of(turn, timeline)
        flags = {"truncated": truncated, "suspicious": bool(instruction_flags(text))}
        heard = heard_words(" ".join(t.content for t in _replied_to(turn, timeline)))
        segments = split_segments(text)
        drafts: list[_Draft] = []
        lead: tuple[str, _Draft | None] | None = None  # a "Here is the helper:" before code
        for index, segment in enumerate(segments):
            if segment.is_code:
                if lead is not None:  # the intro becomes part of the code gem
                    drafts = [d for d in drafts if d is not lead[1]]
                drafts.append(self._code(segment, turn, speaker, listener, lead, **flags))
                lead = None
                continue
            draft = None
            if index == 0 and question is not None and party(question.turn) != party(turn):
                draft = self._answer(segment.text, turn, speaker, listener, question, **flags)
            if draft is None:
                draft = self._sentence(segment.text, turn, speaker, listener, heard, **flags)
            if draft is not None:
                drafts.append(draft)
            lead = (segment.text, draft) if segment.text.rstrip().endswith(":") else None
        return passages(drafts)

    def _sentence(
        self,
        sentence: str,
        turn: SourceTurn,
        speaker: str,
        listener: str,
        heard: frozenset[str] = frozenset(),
        *,
        truncated: bool,
        suspicious: bool,
    ) -> _Draft | None:
        kind = classify(sentence, role=turn.role)
        if kind is None:
            return None
        content, dates = _resolve(sentence, turn, speaker, listener)
        if kind == "fact" and not dates and is_echo(sentence, heard):
            return None  # a nod to what the other person said; their turn holds the fact
        return _Draft(
            kind,
            content,
            sentence,
            turn,
            speaker,
            listener,
            [turn.id],
            truncated,
            suspicious,
            dates,
            embed_text=sentence,
        )

    def _answer(
        self,
        sentence: str,
        turn: SourceTurn,
        speaker: str,
        listener: str,
        question: _Question,
        *,
        truncated: bool,
        suspicious: bool,
    ) -> _Draft | None:
        """ "Twelve people." after "How many people?" → one fact citing answer, then question."""
        if not is_fragment(sentence) or not answers(question.content, sentence):
            return None
        answer, dates = _resolve(sentence, turn, speaker, listener)
        content = f"{question.content} {speaker}: {answer}"
        ids = [turn.id] + ([question.turn.id] if question.in_batch else [])
        return _Draft(
            "fact", content, sentence, turn, speaker, listener, ids, truncated, suspicious, dates
        )

    def _code(
        self,
        segment: Segment,
        turn: SourceTurn,
        speaker: str,
        listener: str,
        lead: tuple[str, _Draft | None] | None,
        *,
        truncated: bool,
        suspicious: bool,
    ) -> _Draft:
        fence = f"```{segment.language}\n{segment.text}\n```"
        language = f"{segment.language} " if segment.language else ""
        first_line = next((line.strip() for line in segment.text.splitlines() if line.strip()), "")
        if lead is not None:
            intro, _ = _resolve(lead[0], turn, speaker, listener)
            original = f"{lead[0]}\n{fence}"
        else:
            intro, original = f"{speaker} shared {language}code:", fence
        draft = _Draft(
            "code",
            f"{intro}\n{fence}",
            original,
            turn,
            speaker,
            listener,
            [turn.id],
            truncated,
            suspicious,
        )
        draft.summary = summarize(f"{intro} {first_line}")
        names = _CODE_NAMES.findall(segment.text)[:3]
        draft.extra_topics = [n.lower() for n in names] + ([segment.language] if language else [])
        return draft

    def _question_of(
        self, turn: SourceTurn, timeline: Sequence[SourceTurn], *, in_batch: bool
    ) -> _Question | None:
        """The turn's closing question, persons and times resolved, if it ends with one."""
        if turn.role not in _ROLES or not isinstance(turn.content, str):
            return None
        text, _ = clean_turn(turn.content, self.max_chars)
        sentences = [s for s in split_segments(text) if not s.is_code]
        if not sentences or not sentences[-1].text.endswith("?"):
            return None
        speaker, listener = display_name(turn), listener_of(turn, timeline)
        content, _ = _resolve(sentences[-1].text, turn, speaker, listener)
        return _Question(content, turn, in_batch)

    # -- batch-level scores --------------------------------------------------------------

    def _gem(self, draft: _Draft, counts: Counter[str]) -> Gem:
        subject, value = subject_value(draft.kind, draft.content, speaker=draft.speaker)
        found = topics(draft.content, exclude=[draft.speaker, draft.listener], counts=counts)
        metadata: dict[str, object] = {
            "extractor": NAME,
            "speaker": draft.speaker,
            "role": draft.turn.role,
            "channel": draft.turn.channel,
        }
        if draft.truncated:
            metadata["truncated"] = True
        if draft.suspicious:
            metadata[SUSPECTED_INSTRUCTION] = True
        if draft.dates:
            metadata["dates"] = draft.dates
        return Gem(
            kind=draft.kind,
            content=draft.content,
            summary=draft.summary or summarize(draft.content),
            topics=list(dict.fromkeys([*draft.extra_topics, *found]))[:5],
            importance=importance(
                draft.kind, draft.content, dates=len(draft.dates), suspicious=draft.suspicious
            ),
            source_turn_ids=list(draft.source_ids),
            occurred_at=draft.turn.at,
            original=draft.original,
            subject=subject,
            value=value,
            metadata=metadata,
            embed_text=key_text(draft.embed_text, draft.turn.speaker) if draft.embed_text else "",
            embed_parts=[key_text(part, draft.turn.speaker) for part in draft.embed_parts],
        )


def passages(drafts: list[_Draft], max_chars: int = PASSAGE_CHARS) -> list[_Draft]:
    """A turn's plain fact sentences as passages of up to `max_chars`, in the order said.

    "Fact" is the fallback kind: a sentence that says something but carries no cue. A long
    turn used to give one memory per such sentence (most memories were facts, a paragraph
    became five), each a fragment of one thought and each its own search hit for the same
    turn. Joined, they are one memory per topic-sized run: the same words stay searchable,
    and its vector is the mean direction of its sentences' (base.gem_vectors), each already
    embedded as one of the turn's passages. Typed gems (preference, decision, todo, goal,
    event, code) and answers merged with their question stay separate: they carry their own
    kind and subject/value keys."""
    out: list[_Draft] = []
    open_passage: _Draft | None = None
    for draft in drafts:
        plain = draft.kind == "fact" and bool(draft.embed_text) and len(draft.source_ids) == 1
        if not plain:
            out.append(draft)
            continue
        if open_passage is None or len(open_passage.original) + 1 + len(draft.original) > max_chars:
            open_passage = draft
            out.append(draft)
            continue
        open_passage.content += " " + draft.content
        open_passage.original += " " + draft.original
        if not open_passage.embed_parts:
            open_passage.embed_parts = [open_passage.embed_text]
        open_passage.embed_parts.append(draft.embed_text)
        open_passage.embed_text += " " + draft.embed_text
        open_passage.dates += [d for d in draft.dates if d not in open_passage.dates]
    return out


def _resolve(sentence: str, turn: SourceTurn, speaker: str, listener: str) -> tuple[str, list[str]]:
    """Times first (tense cues read the original verbs), then persons; and the ISO dates."""
    times = resolve_times(sentence, turn.at)
    content = resolve_persons(times.text, speaker=speaker, listener=listener)
    if content[:1].islower() and sentence[:1].isupper():
        content = content[:1].upper() + content[1:]
    return content, [m.day.isoformat() for m in times.mentions]


def _replied_to(turn: SourceTurn, timeline: Sequence[SourceTurn]) -> list[SourceTurn]:
    """The other person's last turns before this one (a run of up to three): what a remark
    in this turn may be echoing."""
    position = next((i for i, t in enumerate(timeline) if t.id == turn.id), len(timeline))
    me = party(turn)
    before = list(timeline[:position])
    while before and party(before[-1]) == me:
        before.pop()
    run: list[SourceTurn] = []
    while before and len(run) < 3 and party(before[-1]) != me:
        run.append(before.pop())
    return [t for t in run if isinstance(t.content, str)]


def display_name(turn: SourceTurn) -> str:
    """The speaker's name; "the user" / "the assistant" when only the role is known."""
    name = " ".join((turn.speaker or "").split())
    if not name or name.lower() in ("user", "assistant", "system", "tool"):
        return f"the {turn.role}"
    return name


def party(turn: SourceTurn) -> tuple[str, str]:
    """Who is talking: role and name together, so two people who are both "user" (a chat
    between two people, told apart by speaker) are two parties, as a user and an assistant
    are."""
    return turn.role, display_name(turn)


def listener_of(turn: SourceTurn, timeline: Sequence[SourceTurn]) -> str:
    """Who "you" is: the nearest turn of another party, before this one, else after it."""
    me = party(turn)
    position = next((i for i, t in enumerate(timeline) if t.id == turn.id), len(timeline))
    before = [t for t in timeline[:position] if t.role in _ROLES and party(t) != me]
    after = [t for t in timeline[position + 1 :] if t.role in _ROLES and party(t) != me]
    if before:
        return display_name(before[-1])
    if after:
        return display_name(after[0])
    return f"the {'user' if turn.role == 'assistant' else 'assistant'}"
