"""Run an approved tool call: look it up, validate, execute cancellably, bound its output."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from engine.session.turn.cancel import CancelScope, TurnCancelled
from engine.tools.base import ToolError
from engine.tools.output import truncate_output
from engine.tools.protocols import ToolContext
from engine.tools.registry import ToolRegistry, validate_args

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Completed:
    result: str


@dataclass(frozen=True, slots=True)
class Failed:
    error: str


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A ``/stop`` hit the tool while it ran; its work was dropped."""


@dataclass(frozen=True, slots=True)
class Suspended:
    """A sub-agent's call waits on a person whose channel closed (the terminal's input
    ended, a fleet handed the chat over): its frame stays for the resume, and so does
    the spawning call."""


DispatchResult = Completed | Failed | Interrupted | Suspended


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """The model's JSON arguments as an object, or a ``ToolError`` the model can act on."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except RecursionError:  # a few kB of "[[[[": Python's parser gives up
        raise ToolError(
            "tool arguments nest too deeply; send them as a flatter JSON object"
        ) from None
    except json.JSONDecodeError as exc:
        # Ended before the object did: most likely the answer was cut at the model's
        # output limit, and sent again whole it is cut again (found by review).
        ends_early = exc.pos >= len(raw.rstrip()) and not exc.msg.startswith("Extra data")
        cut = ends_early or exc.msg.startswith("Unterminated")
        hint = (
            "they end too early, as when an answer is cut at the output limit: send less "
            "in one call (a long file in parts)"
            if cut
            else "send the arguments as one JSON object"
        )
        raise ToolError(
            f"invalid JSON in tool arguments ({exc.msg}: position {exc.pos}); {hint}"
        ) from None
    except ValueError:  # a number of thousands of digits: Python's limit on reading one
        raise ToolError(
            "tool arguments hold a number too long to read; send it as a string"
        ) from None
    if not isinstance(value, dict):
        raise ToolError(f"tool arguments must be a JSON object, got {type(value).__name__}")
    return value


def check_call(tools: ToolRegistry, name: str, raw_arguments: str | None) -> dict[str, Any]:
    """The call's arguments if it can run at all; ``ToolError`` otherwise.

    Checked before the approval gate: nobody is asked to approve a call to a tool that
    does not exist (a model inventing ``approve``) or with arguments that cannot work.
    """
    tool = tools.get(name)
    if tool is None:
        available = ", ".join(tools.names) or "none"
        raise ToolError(f"unknown tool {name!r}; available tools: {available}")
    args = parse_arguments(raw_arguments)
    validate_args(tool, args)
    return args


async def execute_tool_call(
    tools: ToolRegistry,
    name: str,
    args: dict[str, Any],
    ctx: ToolContext,
    scope: CancelScope,
    *,
    max_output_chars: int,
) -> DispatchResult:
    tool = tools.get(name)
    if tool is None:
        available = ", ".join(tools.names) or "none"
        return Failed(f"unknown tool {name!r}; available tools: {available}")
    try:
        validate_args(tool, args)
        result = await scope.run(tool.run(args, ctx))
    except TurnCancelled:
        return Interrupted()
    except ToolError as exc:
        return Failed(truncate_output(str(exc), max_output_chars))
    except Exception:  # a tool bug must not kill the turn; the model is told, in a sentence
        error_id = uuid.uuid4().hex[:6]
        log.exception("tool %s crashed (error %s)", name, error_id)
        # Never the exception's name or text: the chat shows this result (and the model
        # may repeat it); the log has the traceback under the id.
        return Failed(f"The tool {name} failed with an internal error (error {error_id}).")
    if not isinstance(result, str):
        result = json.dumps(result, default=str)
    return Completed(truncate_output(result, max_output_chars))
