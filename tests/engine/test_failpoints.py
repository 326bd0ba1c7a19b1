"""Failpoints: a listed point kills the process there; ``stop:<point>`` pauses it there,
once, and it goes on when continued."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = """
from engine.failpoints import failpoint
print("before", flush=True)
failpoint("here")
print("after", flush=True)
failpoint("here")  # the stop is spent: no second pause
print("done", flush=True)
"""


def run(points: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CHATHUB_FAILPOINTS": points}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )


def state(child: subprocess.Popen[str]) -> str:
    return Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_listed_point_kills_the_process_there() -> None:
    child = run("elsewhere,here")
    out, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert out.split() == ["before"]


@pytest.mark.timeout(60)
def test_a_stop_point_pauses_the_process_once_and_it_goes_on_when_continued() -> None:
    child = run("stop:here")
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "before"
    deadline = time.monotonic() + 30
    while state(child) != "T":
        assert time.monotonic() < deadline, "the child never stopped"
        time.sleep(0.01)
    child.send_signal(signal.SIGCONT)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 0
    assert out.split() == ["after", "done"]


def test_unlisted_points_do_nothing() -> None:
    child = run("stop:elsewhere")
    out, _ = child.communicate(timeout=30)
    assert (child.returncode, out.split()) == (0, ["before", "after", "done"])
