"""Shell tool: execute_cmd.

The command runs as ``/bin/sh -c COMMAND`` in a new session, hence in its own process
group whose id is the shell's pid. Every exit path kills that whole group, so nothing
the command started outlives the call: not on timeout, not on cancellation, and not
when the shell exits leaving background children (which would otherwise hold the
output pipe open and keep the call waiting until its timeout).

How results are reported (what helps the model):

- Exit status 0 or not, the call *succeeds* and the result ends with ``[exit code N]``.
  A non-zero status is information (``grep`` finding nothing, a failing test run),
  and the model needs the output to act on it.
- A timeout *fails* the call (``ToolError``): its message is the partial output
  followed by ``[command timed out after X s; process group killed]``.
- Output (stdout and stderr interleaved) is bounded by an ``OutputCollector``; a huge
  output keeps its head and tail with a note giving its full size.

The command gets no stdin (``/dev/null``) and the process environment minus chathub's
own credentials (``DEFAULT_HIDDEN_ENV``): the model has no business reading those.

A command dies with the service. ``PR_SET_PDEATHSIG`` would reach the shell alone, not
what it started, so the group carries its own watcher instead (``_WATCHED``): a
subshell blocked reading a pipe whose only writer is this process. When the service
dies, even by ``kill -9``, the kernel closes that pipe and the watcher kills the whole
group. The group and its leader's identity are recorded on the tool-call row
(``ToolContext.processes``), so recovery can make sure the group is gone before the
call is reported as interrupted (docs/architecture.md, "Interrupted calls").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.tools.base import ToolError
from engine.tools.builtins._common import BuiltinTool, object_schema
from engine.tools.output import OutputCollector
from engine.tools.processes import keep_environment_private, process_identity
from engine.tools.protocols import ProcessLog, ToolCategory, ToolContext
from engine.tools.workspace import Workspace

__all__ = ["DEFAULT_HIDDEN_ENV", "ExecuteCmd"]

log = logging.getLogger(__name__)

#: Environment variables of chathub's own credentials, never passed to commands.
DEFAULT_HIDDEN_ENV: frozenset[str] = frozenset(
    {
        "TELEGRAM_BOT_TOKEN",
        "TELEGRAM_WEBHOOK_SECRET",
        "LLM_API_KEY",
        "CHATHUB_API_TOKEN",
        "DATABASE_URL",
        "CHATHUB_TEST_POSTGRES_URL",
    }
)

#: Names that hold a credential, whoever set them (the platforms' tokens, the providers'
#: keys, passwords; Slack's, Discord's and Matrix's reached every command, found by
#: review), and every variable of chathub's own settings.
_CREDENTIAL = re.compile(
    r"TOKEN|SECRET|PASSW|API_KEY|PRIVATE_KEY|CREDENTIAL|DATABASE_URL|POSTGRES_URL"
    r"|^(TELEGRAM|DISCORD|SLACK|MATRIX|LLM|EMBEDDING|SPEECH|TRANSCRIBE|CHATHUB)_",
    re.IGNORECASE,
)

#: After the shell exits and its group is killed, how long to wait for the pipe to close.
_DRAIN_S = 1.0

#: ``sh -c _WATCHED sh COMMAND``: the watcher holds the service's pipe (stdin, as fd 3),
#: the command replaces the shell (same pid, so the group leader, and its own exit code)
#: with stdin from /dev/null. EOF on the pipe means the service is gone: kill the group.
_WATCHED = 'exec 3<&0; (read -r _ <&3; kill -KILL 0) & exec /bin/sh -c "$1" 3<&- </dev/null'


def _kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid``; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _format_seconds(value: float) -> str:
    return f"{value:g}"


class ExecuteCmd(BuiltinTool):
    """``execute_cmd{command, workdir?, timeout_s?}``: run a shell command in the workspace."""

    name = "execute_cmd"
    category = ToolCategory.SHELL

    def __init__(
        self,
        workspace: Workspace,
        *,
        default_timeout_s: float = 120.0,
        max_timeout_s: float = 600.0,
        max_output_chars: int = 40_000,
        hidden_env: Iterable[str] = DEFAULT_HIDDEN_ENV,
    ) -> None:
        if not 0 < default_timeout_s <= max_timeout_s:
            raise ValueError("need 0 < default_timeout_s <= max_timeout_s")
        self.workspace = workspace
        self.default_timeout_s = default_timeout_s
        self.max_timeout_s = max_timeout_s
        self.max_output_chars = max_output_chars
        self.hidden_env = frozenset(hidden_env)
        # A command is a child of this process, as the same user: it could read this
        # process's environment as it started (/proc/$PPID/environ), credentials and all.
        keep_environment_private()
        self.description = (
            "Run a shell command (/bin/sh -c) in the workspace and return its combined "
            "stdout and stderr followed by '[exit code N]'. A non-zero exit code is "
            "reported, not treated as an error. The command is killed after timeout_s "
            f"seconds (default {_format_seconds(default_timeout_s)}, at most "
            f"{_format_seconds(max_timeout_s)}); processes it leaves running in the "
            "background are killed when it finishes. There is no stdin. Prefer read_file, "
            "write_file, edit_file and list_files for file work."
        )
        self.parameters = object_schema(
            {
                "command": {"type": "string", "description": "The shell command line."},
                "workdir": {
                    "type": "string",
                    "description": "Directory to run in, inside the workspace "
                    "(default: the working directory).",
                },
                "timeout_s": {
                    "type": "number",
                    "description": "Seconds before the command is killed "
                    f"(default {_format_seconds(default_timeout_s)}, "
                    f"max {_format_seconds(max_timeout_s)}).",
                },
            },
            ["command"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command: str = args["command"]
        if not command.strip():
            raise ToolError(f"{self.name}: 'command' is empty")
        if "\0" in command:
            raise ToolError(f"{self.name}: 'command' contains a NUL byte")
        try:  # half an emoji (a token that cut it): an internal error until 2026-12-06
            os.fsencode(command)
        except UnicodeEncodeError:
            raise ToolError(
                f"{self.name}: 'command' holds half of a character (e.g. of an emoji); "
                "send it again whole"
            ) from None
        cwd = self._workdir(args.get("workdir"), ctx.working_directory)
        timeout = self._timeout(args.get("timeout_s"))
        log.info(
            "execute_cmd: running shell command",
            extra={"command": command, "workdir": str(cwd), "timeout_s": timeout},
        )
        return await self._execute(command, cwd, timeout, ctx.processes)

    def _workdir(self, workdir: str | None, working_directory: Path) -> Path:
        path = self.workspace.resolve(workdir or ".", cwd=working_directory)
        if not path.is_dir():
            rel = self.workspace.relative(path)
            what = "does not exist" if not path.exists() else "is not a directory"
            raise ToolError(f"{self.name}: workdir '{rel}' {what}")
        return path

    def _timeout(self, value: float | None) -> float:
        if value is None:
            return self.default_timeout_s
        if value <= 0:
            raise ToolError(f"{self.name}: timeout_s must be positive, got {value}")
        # Capped rather than refused: the model asked for "long", it gets the longest.
        return min(float(value), self.max_timeout_s)

    def _env(self) -> dict[str, str]:
        return {
            key: val
            for key, val in os.environ.items()
            if key not in self.hidden_env and not _CREDENTIAL.search(key)
        }

    async def _execute(
        self, command: str, cwd: Path, limit_s: float, processes: ProcessLog | None = None
    ) -> str:
        loop = asyncio.get_running_loop()
        collector = OutputCollector(self.max_output_chars)
        protocol = _ShellProtocol(collector, loop)
        start = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: protocol,
                "/bin/sh",
                "-c",
                _WATCHED,
                "sh",
                command,
                stdin=subprocess.PIPE,  # the watcher's pipe: never written, closed by death
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=self._env(),
                start_new_session=True,  # own session, so own process group: pgid == pid
            )
        )
        try:
            # Shielded: the shell runs before its pipes are connected. Cancelled in that
            # window, asyncio would kill the shell alone and leave its children running.
            transport, _ = await asyncio.shield(start)
        except asyncio.CancelledError:
            start.add_done_callback(_kill_when_started)
            raise
        except OSError as exc:
            raise ToolError(f"{self.name}: cannot start /bin/sh: {exc}") from None
        pgid = transport.get_pid()
        try:
            if processes is not None:
                await _record(processes, pgid)
            try:
                async with asyncio.timeout(limit_s):
                    # Shielded: a timeout or cancellation must not cancel the future itself,
                    # it is still needed to see the shell go.
                    await asyncio.shield(protocol.exited)
            except TimeoutError:
                _kill_group(pgid)
                await protocol.drained()
                raise ToolError(
                    f"{collector.text() or '(no output)'}\n[command timed out after "
                    f"{_format_seconds(limit_s)} s; process group killed]"
                ) from None
            # The shell is done; whatever it left behind goes with it.
            _kill_group(pgid)
            await protocol.drained()
        except asyncio.CancelledError:
            # Kill at once, synchronously: the child must not outlive a cancelled turn.
            _kill_group(pgid)
            # Then see the shell reaped (SIGKILL makes that a matter of milliseconds),
            # so no process is left for the garbage collector to complain about.
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(protocol.exited), _DRAIN_S)
            raise
        finally:
            # Closes the pipes; the loop's child watcher still reaps the shell.
            transport.close()
        return _with_status(collector.text(), transport.get_returncode())


class _ShellProtocol(asyncio.SubprocessProtocol):
    """Feeds the pipe straight into the collector and reports exit and pipe closure apart.

    ``Process.wait()`` of asyncio (3.11) only returns once the pipes are closed too, so
    a background child holding stdout would hide the shell's exit; hence this protocol.
    """

    def __init__(self, collector: OutputCollector, loop: asyncio.AbstractEventLoop) -> None:
        self.collector = collector
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.collector.feed(data.encode() if isinstance(data, str) else data)

    def process_exited(self) -> None:
        _resolve(self.exited)

    def connection_lost(self, exc: Exception | None) -> None:
        # Called once the process has exited and every pipe is closed.
        _resolve(self.exited)
        _resolve(self.closed)

    async def drained(self) -> None:
        """Wait, boundedly, until the output pipe is closed and fully read."""
        # Only a process that left the group (setsid) and kept the pipe can make this wait.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.closed), _DRAIN_S)


async def _record(processes: ProcessLog, pgid: int) -> None:
    """Put the group on the call's row; the command already runs (the watcher covers it)."""
    identity = process_identity(pgid)
    try:
        await processes.started(pgid, identity.encode() if identity else None)
    except Exception:  # the database is away: the group still dies with the service
        log.exception("could not record process group %s", pgid)


def _kill_when_started(start: asyncio.Future[tuple[asyncio.SubprocessTransport, Any]]) -> None:
    """Done-callback for a start that was cancelled: kill the group once it exists."""
    if start.cancelled() or start.exception() is not None:
        return
    transport, _ = start.result()
    _kill_group(transport.get_pid())
    transport.close()


def _resolve(future: asyncio.Future[None]) -> None:
    # Both process_exited and connection_lost resolve ``exited``; the second is a no-op.
    if not future.done():
        future.set_result(None)


def _with_status(output: str, returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            status = f"[killed by signal {signal.Signals(-returncode).name}]"
        except ValueError:
            status = f"[killed by signal {-returncode}]"
    else:
        status = f"[exit code {returncode}]"
    if not output:
        return f"(no output)\n{status}"
    sep = "" if output.endswith("\n") else "\n"
    return f"{output}{sep}{status}"
