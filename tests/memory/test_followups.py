"""Follow-up jobs run after indexing, in their own task: coalesced, isolated, resumable."""

from __future__ import annotations

import asyncio

import pytest

from memory.followups import FollowUps


async def test_wake_ups_while_a_pass_runs_coalesce_into_one_more_pass() -> None:
    release = asyncio.Event()
    passes = 0

    async def job() -> int:
        nonlocal passes
        passes += 1
        await release.wait()
        return 1

    followups = FollowUps([("job", job)])
    followups.start()  # the first pass: what a previous run left pending
    await asyncio.sleep(0)
    for _ in range(5):
        followups.wake()
    release.set()
    await followups.settled()
    await followups.close()
    assert passes == 2


async def test_a_failing_job_is_logged_and_the_next_job_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done: list[str] = []

    async def broken() -> int:
        raise RuntimeError("model away")

    async def fine() -> int:
        done.append("fine")
        return 1

    followups = FollowUps([("broken", broken), ("fine", fine)])
    followups.start()
    await followups.settled()
    followups.wake()
    await followups.settled()
    await followups.close()
    assert done == ["fine", "fine"]
    assert "broken failed" in caplog.text


async def test_without_jobs_nothing_runs_and_settled_returns_at_once() -> None:
    followups = FollowUps()
    followups.start()
    followups.wake()
    await followups.settled()
    assert not followups
    await followups.close()
