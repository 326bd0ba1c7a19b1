"""A command dies with the service: kill -9 the process running execute_cmd, and the
whole process group goes, background children included, before they have any effect."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.tools.processes import members_of, process_identity

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

SERVICE = """
import asyncio, sys
from pathlib import Path
from engine.tools.builtins.shell import ExecuteCmd
from engine.tools.workspace import Workspace

async def main():
    tool = ExecuteCmd(Workspace(Path(sys.argv[1])), default_timeout_s=120)
    await tool._execute(sys.argv[2], Path(sys.argv[1]), 120)

asyncio.run(main())
"""


def _wait_for(predicate, within_s: float = 10):
    deadline = time.monotonic() + within_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
    return value


def test_kill_9_of_the_service_kills_the_command_and_what_it_started(tmp_path: Path):
    command = "echo $$ > leader; (sleep 2; echo late >> effect) & sleep 60"
    service = subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(tmp_path), command],
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        leader = tmp_path / "leader"
        group = int(_wait_for(lambda: leader.exists() and leader.read_text().strip()))
        identity = process_identity(group)
        assert identity is not None
        _wait_for(lambda: len(members_of(group, identity)) >= 3)  # command, subshell, sleeps

        os.kill(service.pid, signal.SIGKILL)
        service.wait(timeout=10)

        _wait_for(lambda: members_of(group, identity) == [], within_s=5)
        assert not (tmp_path / "effect").exists()
    finally:
        if service.poll() is None:
            service.kill()
        service.wait(timeout=10)
        if (tmp_path / "leader").exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int((tmp_path / "leader").read_text()), signal.SIGKILL)
