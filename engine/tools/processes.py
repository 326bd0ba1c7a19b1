"""Process groups of commands: who they are, and making sure one is gone after a crash.

A command's process group id is a pid, and pids are reused. A group is therefore
recorded with its leader's identity: the kernel's boot id and the leader's start time
(``/proc/<pid>/stat`` field 22, clock ticks since boot). After a restart a group is
only touched if it is provably the one recorded: same boot, and members started no
earlier than the leader did. Where ``/proc`` does not exist (not Linux) there is no
identity and nothing can be proven: the group is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ProcessIdentity",
    "keep_environment_private",
    "members_of",
    "process_identity",
    "reap_group",
]

log = logging.getLogger(__name__)

_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    boot_id: str
    start_ticks: int

    def encode(self) -> str:
        return f"{self.boot_id}:{self.start_ticks}"

    @classmethod
    def decode(cls, text: str | None) -> ProcessIdentity | None:
        if not text:
            return None
        boot_id, _, ticks = text.rpartition(":")
        try:
            return cls(boot_id, int(ticks)) if boot_id else None
        except ValueError:
            return None


def _boot_id(proc: Path) -> str | None:
    try:
        return (proc / "sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _stat(proc: Path, pid: int) -> tuple[int, int] | None:
    """``(process group, start ticks)`` of ``pid``; ``None`` if it is gone or a zombie.

    A zombie has finished (it can have no further effect) and waits only for a parent
    that reaps it, which in a container may never come.
    """
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        if fields[0] in ("Z", "X"):
            return None
        return int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def process_identity(pid: int, *, proc: Path = _PROC) -> ProcessIdentity | None:
    """The identity of a running process, ``None`` where it cannot be read."""
    boot_id, stat = _boot_id(proc), _stat(proc, pid)
    if boot_id is None or stat is None:
        return None
    return ProcessIdentity(boot_id, stat[1])


def members_of(group: int, since: ProcessIdentity, *, proc: Path = _PROC) -> list[int]:
    """Pids still in process group ``group`` that started since its recorded leader."""
    if _boot_id(proc) != since.boot_id:
        return []  # the machine rebooted: nothing of that group survived
    found = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        stat = _stat(proc, int(entry.name))
        if stat is not None and stat[0] == group and stat[1] >= since.start_ticks:
            found.append(int(entry.name))
    return found


async def reap_group(
    group: int,
    recorded: str | None,
    *,
    within_s: float = 5.0,
    proc: Path = _PROC,
    kill: Callable[[int, int], None] = os.kill,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> bool:
    """Kill what is left of a recorded process group and wait until it is gone.

    Returns ``True`` when no member is left (or none could be proven to be ours).
    """
    since = ProcessIdentity.decode(recorded)
    if since is None:
        return True
    waited = 0.0
    while members := members_of(group, since, proc=proc):
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)
        if waited >= within_s:
            log.error("process group %s still has %d member(s) after SIGKILL", group, len(members))
            return False
        await sleep(0.01)
        waited += 0.01
    return True


_PR_SET_DUMPABLE = 4


def keep_environment_private() -> bool:
    """Make this process non-dumpable (Linux): another process of the same user, a
    command it runs included, can then neither read its /proc files (``environ``: the
    credentials it started with) nor attach to it; root still can. Core dumps are off
    too. Whether it took."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: nothing to do here
        return False
