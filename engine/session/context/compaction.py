"""Context compaction: the older part of a frame's history becomes one summary.

Opt-in (``[compaction] enabled = true``). At the start of a turn ``CompactionTrigger`` asks
:meth:`Compactor.compact`; when the previous turn's input tokens (or, unknown, a
character estimate of the history) reach ``threshold_tokens``, the rows before the
boundary are summarised by a model, the summary is stored in ``chat_summaries`` with
``covers_up_to_message_id`` and ``CompactionDone`` is published. From then on the
context is the summary plus the rows after that id. ``/compact`` forces it.

The boundary rule (see :func:`choose_boundary`): the kept part starts at a turn start,
a user/agent row (or a notification) right after an assistant row. A tool call and its result live on the
same assistant row (``MessageRow.tool_calls``) and every row of a turn is kept or
summarised together, so no call is ever separated from its result or its follow-up.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.bus.chat import ChatEventBus, CompactionEvent
from engine.config import CompactionConfig
from engine.llm.protocols import ChatModel
from engine.llm.registry import ModelRegistry
from engine.llm.types import LlmError, Message
from engine.session.context.transcript import FrameTranscript, starts_turn, with_carried
from engine.store.history import History
from engine.store.rows import OPEN_TOOL_STATUSES, FrameRow, MessageRow, SessionRow
from engine.store.summaries import SummaryRow, SummaryStore

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
#: Head + tail kept of each part of the transcript given to the summariser.
MESSAGE_HEAD, MESSAGE_TAIL = 6_000, 1_500
RESULT_HEAD, RESULT_TAIL = 4_000, 1_500
ARGUMENTS_MAX = 1_200
#: The summariser's input never exceeds this; the oldest entries give way first.
MAX_SUMMARY_INPUT_CHARS = 300_000

SUMMARIZER_PREAMBLE = (
    "You are writing a checkpoint summary of a conversation between a user and an AI "
    "assistant that uses tools. The summary replaces the messages below in the "
    "assistant's context: afterwards the assistant sees only the summary and the most "
    "recent messages. Keep every fact, decision, name, path, number and open item the "
    "assistant needs to continue; drop chit-chat and tool output nobody needs again. "
    "Write in the language of the conversation. Do not answer the user and do not "
    "continue the conversation: only write the summary."
)
SUMMARY_TEMPLATE = """Write the summary with these sections (omit a section that would be empty):

## Active Task
What the user asked for most recently and is still in progress, in the user's words where possible.
## Goal
The user's overall objective in this conversation.
## Constraints & Preferences
Instructions, preferences and rules the user stated.
## Progress
### Done
### In Progress
### Blocked
## Key Decisions
Decisions made and why.
## Relevant Files & Resources
Paths, URLs, commands, identifiers, with what each one is for.
## Tool Results Worth Keeping
Facts learned from tool calls (abbreviated), and failures that should not be repeated.
## Open Questions
Questions asked and not yet answered, by either side.
## Next Steps
What the assistant should do next.
## Critical Context
Anything else that would be costly to lose (exact values, error messages, names).

Resume from "## Active Task"; keep it under {max_chars} characters."""


class CompactionError(Exception):
    """A compaction could not run; nothing was stored and the history is unchanged."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    summary: SummaryRow
    rows_summarised: int
    rows_kept: int
    chars_before: int  # previous summary + every row since it, as the model would see them
    chars_after: int  # new summary + kept rows
    triggered_by_tokens: int
    model: str

    @property
    def summary_text(self) -> str:
        return self.summary.content

    @property
    def covers_up_to_message_id(self) -> int:
        return self.summary.covers_up_to_message_id


# -- estimates ------------------------------------------------------------------------


def message_chars(message: Message) -> int:
    """Characters of one chat message: content (text parts), reasoning, tool calls."""
    total = _content_chars(message.get("content"))
    total += len(message.get("reasoning_content") or "")
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        total += len(function.get("name") or "") + len(function.get("arguments") or "")
    return total


def _content_chars(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    return sum(len(part.get("text") or "") for part in content if isinstance(part, dict))


def estimate_tokens(messages: Sequence[Message]) -> int:
    """About characters / 4 (underestimates non-ASCII text: set the threshold lower)."""
    chars = sum(message_chars(m) for m in messages)
    return -(-chars // CHARS_PER_TOKEN)


def summary_message(summary: str) -> Message:
    """How ``MessageBuilder.build(summary=...)`` renders the summary (for estimates)."""
    return {"role": "system", "content": f"Summary of the earlier conversation:\n{summary}"}


def render_rows(rows: Sequence[MessageRow]) -> list[Message]:
    """Rows as the model would receive them (no tool result hidden)."""
    transcript = FrameTranscript(max_messages=len(rows) + 1, max_tool_result_chars=None)
    transcript.load(list(rows))
    return transcript.messages()


# -- boundary -------------------------------------------------------------------------


def choose_boundary(rows: Sequence[MessageRow], keep_recent: int) -> int | None:
    """The id of the last row to summarise, or ``None`` when there is nothing to compact.

    ``rows`` are a frame's rows since the previous summary, oldest first. The kept part
    starts at a turn start (a user/agent row or a notification right after an assistant
    row: ``starts_turn``), at least
    ``keep_recent`` rows from the end, as late as possible. So the summarised part ends
    with the assistant row that closed a turn: a tool call and its result (same row) and
    the rounds of one turn are never split, and the kept part renders as whole turns.
    With ``keep_recent`` 0 a history ending in a closed turn may be summarised entirely.
    A row with a running/pending call (an interrupted turn) is never summarised.
    """
    keep_recent = max(keep_recent, 0)
    last_start = len(rows) - keep_recent  # the kept part may start here or earlier
    best: int | None = None
    for i in range(1, min(last_start, len(rows)) + 1):
        previous = rows[i - 1]
        if _has_open_call(previous):
            break
        ends_turn = previous.role == "assistant" and (i == len(rows) or starts_turn(rows[i]))
        if ends_turn:
            best = i
    return rows[best - 1].id if best is not None else None


def _has_open_call(row: MessageRow) -> bool:
    return any(call.status in OPEN_TOOL_STATUSES for call in row.tool_calls)


# -- the summariser's input -----------------------------------------------------------


def _clip(text: str, head: int, tail: int) -> str:
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n...[truncated {len(text) - head - tail} chars]...\n{text[-tail:]}"


def format_rows(rows: Sequence[MessageRow]) -> list[str]:
    """One labelled entry per message and per tool result, long parts abbreviated."""
    entries: list[str] = []
    for row in rows:
        if row.role != "assistant":
            label = "USER" if row.role == "user" else "AGENT"
            said = with_carried(row)  # what it carried is summarised with it
            entries.append(f"[{label}]: {_clip(said, MESSAGE_HEAD, MESSAGE_TAIL)}")
            continue
        text = _clip(row.content or "", MESSAGE_HEAD, MESSAGE_TAIL)
        if row.tool_calls:
            calls = ", ".join(
                f"{c.name}({_clip(c.arguments or '', ARGUMENTS_MAX, 0)})" for c in row.tool_calls
            )
            text = f"{text} [Tool calls: {calls}]".strip()
        entries.append(f"[ASSISTANT]: {text}")
        for call in row.tool_calls:
            status = "" if call.status == "done" else f" ({call.status})"
            result = _clip(call.result or "", RESULT_HEAD, RESULT_TAIL)
            entries.append(f"[TOOL RESULT {call.name} {call.llm_call_id}{status}]: {result}")
    return entries


def summary_prompt(
    rows: Sequence[MessageRow], previous: str | None, *, max_summary_chars: int
) -> str:
    """One user message: preamble, previous summary (iterative update), transcript, template."""
    entries = format_rows(rows)
    budget = MAX_SUMMARY_INPUT_CHARS - len(previous or "")
    omitted = 0
    while entries and sum(len(e) + 2 for e in entries) > budget:
        entries.pop(0)
        omitted += 1
    if omitted:
        entries.insert(0, f"[... {omitted} earlier entries omitted ...]")
    transcript = "\n\n".join(entries)
    template = SUMMARY_TEMPLATE.format(max_chars=max_summary_chars)
    if previous:
        return (
            f"{SUMMARIZER_PREAMBLE}\n\nPREVIOUS SUMMARY (of the conversation before the "
            f"messages below):\n{previous}\n\nNEW MESSAGES SINCE THEN:\n{transcript}\n\n"
            "Update the previous summary with the new messages: keep what still matters, "
            f"revise what changed, add what is new.\n\n{template}"
        )
    return (
        f"{SUMMARIZER_PREAMBLE}\n\nCONVERSATION:\n{transcript}\n\n"
        f"Create a structured checkpoint summary of this conversation.\n\n{template}"
    )


# -- loading a compacted context ------------------------------------------------------


async def rows_after(
    history: History, stack_id: int, boundary_id: int, limit: int | None = None
) -> list[MessageRow]:
    """The frame's rows newer than ``boundary_id`` (the newest ``limit`` of them)."""
    return await history.load(stack_id, after_id=boundary_id, limit=limit)


async def load_context(
    history: History, summaries: SummaryStore, stack_id: int, *, limit: int | None
) -> tuple[SummaryRow | None, list[MessageRow]]:
    """The frame's latest summary and the rows after it."""
    summary = await summaries.latest(stack_id)
    covered = summary.covers_up_to_message_id if summary else 0
    return summary, await rows_after(history, stack_id, covered, limit)


# -- the compactor --------------------------------------------------------------------


class Compactor:
    """Stateless and shared by every handler of a process."""

    def __init__(
        self,
        models: ModelRegistry | Sequence[ChatModel],
        summaries: SummaryStore,
        history: History,
        bus: ChatEventBus,
        config: CompactionConfig,
    ) -> None:
        self.models = models
        self.summaries = summaries
        self.history = history
        self.bus = bus
        self.config = config

    def applies_to(self, session: SessionRow, frame: FrameRow | None = None) -> bool:
        """Enabled, not an ephemeral session (cron, tic), and the root frame."""
        if not self.config.enabled or session.is_ephemeral:
            return False
        return frame is None or frame.depth == 0

    async def should_compact(
        self,
        session: SessionRow,
        last_input_tokens: int | None,
        transcript_messages: Sequence[Message],
        *,
        summary: str | None = None,
    ) -> bool:
        """Threshold check: the previous turn's input tokens, else an estimate."""
        if not self.applies_to(session):
            return False
        return self.effective_tokens(last_input_tokens, transcript_messages, summary) >= (
            self.config.threshold_tokens
        )

    @staticmethod
    def effective_tokens(
        last_input_tokens: int | None,
        transcript_messages: Sequence[Message],
        summary: str | None = None,
    ) -> int:
        if last_input_tokens:
            return last_input_tokens
        messages = list(transcript_messages)
        if summary:
            messages.insert(0, summary_message(summary))
        return estimate_tokens(messages)

    async def compact(
        self,
        session: SessionRow,
        frame: FrameRow,
        rows: Sequence[MessageRow] | None = None,
        *,
        force: bool = False,
        last_input_tokens: int | None = None,
    ) -> CompactionResult | None:
        """Summarise ``frame``'s older rows; ``None`` when skipped or nothing to compact.

        ``rows``: the frame's rows since its latest summary (loaded when omitted; rows at
        or before the summary's boundary are ignored). Without ``force`` the threshold
        applies (``last_input_tokens``, else the estimate of summary + rows); ``force``
        (``/compact``) skips it. Raises :class:`CompactionError` when disabled or when the
        model fails or answers nothing: then nothing is stored.
        """
        if not self.config.enabled:
            raise CompactionError("context compaction is not enabled ([compaction] enabled)")
        if not self.applies_to(session, frame):
            return None
        if not force and last_input_tokens and last_input_tokens < self.config.threshold_tokens:
            # Known to be small: the rows are not read (the whole history was read and
            # rendered at each turn's start until 2026-12-06; found by review).
            return None
        previous = await self.summaries.latest(frame.id)
        covered = previous.covers_up_to_message_id if previous else 0
        if rows is None:
            rows = await rows_after(self.history, frame.id, covered)
        else:
            rows = [r for r in rows if r.id > covered and r.status == "ok"]
        rendered = render_rows(rows)
        before = list(rendered)
        if previous:
            before.insert(0, summary_message(previous.content))
        tokens = self.effective_tokens(last_input_tokens, before)
        if not force and tokens < self.config.threshold_tokens:
            return None
        boundary = choose_boundary(rows, self.config.keep_recent)
        if boundary is None:
            return None
        summarised = [r for r in rows if r.id <= boundary]
        kept = [r for r in rows if r.id > boundary]
        prompt = summary_prompt(
            summarised,
            previous.content if previous else None,
            max_summary_chars=self.config.max_summary_chars,
        )
        text, model_name = await self._summarise(prompt)
        row = await self.summaries.add(frame.id, text, boundary)
        self.bus.compaction_done(
            CompactionEvent(
                session_id=session.id,
                stack_id=frame.id,
                summary_id=row.id,
                covers_up_to_message_id=boundary,
                triggered_by_tokens=tokens,
            )
        )
        after = [summary_message(text), *render_rows(kept)]
        result = CompactionResult(
            summary=row,
            rows_summarised=len(summarised),
            rows_kept=len(kept),
            chars_before=sum(message_chars(m) for m in before),
            chars_after=sum(message_chars(m) for m in after),
            triggered_by_tokens=tokens,
            model=model_name,
        )
        log.info(
            "compacted frame %d: %d rows up to #%d summarised by %s (%d -> %d chars)",
            frame.id,
            result.rows_summarised,
            boundary,
            model_name,
            result.chars_before,
            result.chars_after,
        )
        return result

    def _candidates(self) -> list[ChatModel]:
        if isinstance(self.models, ModelRegistry):
            return self.models.candidates(self.config.model)
        models = list(self.models)
        first = next((m for m in models if m.name == self.config.model), None)
        return [first, *(m for m in models if m is not first)] if first else models

    async def _summarise(self, prompt: str) -> tuple[str, str]:
        """The summary text and the model that wrote it; fallbacks on retriable errors."""
        candidates = self._candidates()
        if not candidates:
            raise CompactionError("compaction failed: no model is configured")
        messages: list[Message] = [{"role": "user", "content": prompt}]
        failure = ""
        for model in candidates:
            try:
                response = await model.complete(messages, [])
            except LlmError as exc:
                failure = f"{model.name}: {exc}"
                if exc.retriable:
                    log.warning("compaction model %s failed, trying the next: %s", model.name, exc)
                    continue
                break
            text = (response.content or "").strip()
            if not text:
                raise CompactionError(f"compaction failed: {model.name} returned an empty summary")
            limit = self.config.max_summary_chars
            if len(text) > limit:
                text = text[:limit].rstrip() + "\n[summary truncated]"
            return text, model.name
        raise CompactionError(f"compaction failed, the history is unchanged ({failure})")
