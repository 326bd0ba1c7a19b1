"""Process groups after a crash: found by identity, killed, and never a stranger's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.tools.processes import ProcessIdentity, members_of, process_identity, reap_group

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.fixture
def sleeper():
    """A process group of two sleeping processes (a shell and its child), like a command."""
    child = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & sleep 60; wait"], start_new_session=True)
    yield child
    if child.poll() is None:
        os.killpg(child.pid, 9)
    child.wait(timeout=10)


def _wait_members(group: int, identity: ProcessIdentity, count: int) -> None:
    """Poll until the shell has started its children (a real process cannot be awaited)."""
    deadline = time.monotonic() + 10
    while len(members_of(group, identity)) < count:
        assert time.monotonic() < deadline, "the group never had its members"
        time.sleep(0.005)


async def test_a_recorded_group_is_killed_with_everything_it_started(sleeper):
    identity = process_identity(sleeper.pid)
    assert identity is not None
    _wait_members(sleeper.pid, identity, 3)

    assert await reap_group(sleeper.pid, identity.encode())

    assert members_of(sleeper.pid, identity) == []
    assert sleeper.wait(timeout=10) == -9


async def test_a_group_whose_leader_started_later_is_a_stranger_and_is_left_alone(sleeper):
    identity = process_identity(sleeper.pid)
    assert identity is not None
    recorded_later = ProcessIdentity(identity.boot_id, identity.start_ticks + 10**9)

    assert await reap_group(sleeper.pid, recorded_later.encode())

    assert sleeper.poll() is None  # pid reused by someone else: not touched


async def test_a_group_recorded_in_an_earlier_boot_is_gone(sleeper):
    identity = process_identity(sleeper.pid)
    assert identity is not None
    other_boot = ProcessIdentity("not-this-boot", identity.start_ticks)

    assert await reap_group(sleeper.pid, other_boot.encode())

    assert sleeper.poll() is None


@pytest.mark.parametrize("recorded", [None, "", "no-colon", ":12", "boot:twelve"])
async def test_an_unreadable_identity_proves_nothing_and_touches_nothing(sleeper, recorded):
    assert ProcessIdentity.decode(recorded) is None
    assert await reap_group(sleeper.pid, recorded)
    assert sleeper.poll() is None


def test_the_identity_of_a_process_that_is_gone_is_none():
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    assert process_identity(int(done.stdout)) is None


def test_the_identity_survives_a_command_name_with_spaces_and_parentheses(tmp_path: Path):
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("b00t\n")
    (proc / "42").mkdir()
    fields = ["S", "1", "42"] + ["0"] * 16 + ["777"] + ["0"] * 10
    (proc / "42/stat").write_text(f"42 (a (weird) name) {' '.join(fields)}\n")
    assert process_identity(42, proc=proc) == ProcessIdentity("b00t", 777)
    assert members_of(42, ProcessIdentity("b00t", 700), proc=proc) == [42]
    (proc / "42/stat").write_text(f"42 (zombie) Z {' '.join(fields[1:])}\n")
    assert members_of(42, ProcessIdentity("b00t", 700), proc=proc) == []
