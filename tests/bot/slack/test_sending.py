"""What Slack is sent: mrkdwn parts within 4,000 characters, paced per channel, a 429
storm waited out, every reply once."""

from __future__ import annotations

import asyncio

from bot.delivery import Pacing
from bot.delivery.pacing import Pacer
from bot.settings import load_settings
from bot.slack.sending import MESSAGE_LIMIT, SlackClient, mrkdwn_parts, slack_pacing
from engine.llm.scripted import text
from tests.bot.slack.conftest import ALICE, BOB, MakeService, slack_of, texts, until
from tests.fakes.slack_server import FakeSlackServer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def test_a_long_answer_is_cut_into_parts_with_their_code_blocks_closed() -> None:
    code = "\n".join(f"line {i} <tag> & more" for i in range(400))
    answer = "Intro **bold**.\n\n```python\n" + code + "\n```\n\nThe end."
    parts = mrkdwn_parts(answer)
    assert len(parts) > 1
    assert all(len(part) <= MESSAGE_LIMIT for part in parts)
    for part in parts:
        assert part.count("```") % 2 == 0, part[:200]  # cut inside the block: closed, reopened
    whole = "".join(parts)
    assert "<tag>" not in whole and "&lt;tag&gt;" in whole
    assert "line 399" in whole


def test_an_unclosed_code_block_at_the_cut_is_still_closed() -> None:
    answer = "Look:\n```\n" + "x = 1\n" * 2000  # the model never closed it
    parts = mrkdwn_parts(answer)
    assert all(len(p) <= MESSAGE_LIMIT and p.count("```") % 2 == 0 for p in parts)


def test_a_long_nested_list_cut_into_parts_shows_no_code_block() -> None:
    """Cut between an item and its indented child, the next part began with an indented
    line, which Markdown reads as code: a stray code block (found by review)."""
    markdown = "\n".join(
        f"{i}. Item number {i} with some words here\n"
        f"    - nested detail for item {i} that is a bit long"
        for i in range(1, 80)
    )
    parts = mrkdwn_parts(markdown, limit=1000)
    assert len(parts) > 1
    assert not any("```" in part for part in parts)
    assert "```\nprint(1)\n```" in mrkdwn_parts("```\nprint(1)\n```")[0]  # fenced: code


def test_an_empty_answer_is_no_message() -> None:
    assert mrkdwn_parts("") == [] and mrkdwn_parts("   \n ") == []


async def test_twelve_messages_to_one_channel_keep_five_in_any_five_seconds() -> None:
    clock = FakeClock()
    policy = slack_pacing(load_settings(_env_file=None)).policy
    client = SlackClient(None)  # type: ignore[arg-type]
    pacer = Pacer(policy, clock=clock, sleep=clock.sleep, is_group=client.is_group)
    sent = []
    for _ in range(12):
        (await pacer.turn("C0GENERAL1")).answered()
        sent.append(clock.now)
    for first in range(len(sent)):
        assert len([t for t in sent if sent[first] <= t < sent[first] + 5.0]) <= 5, sent
    assert sent[:5] == [0.0] * 5
    before = clock.now
    for channel in range(20):  # other channels wait only for the app's 20 a second
        (await pacer.turn(f"C0OTHER{channel:03d}")).answered()
    assert clock.now - before <= 1.1


async def test_a_429_storm_is_waited_out_and_the_reply_sent_once(
    make_service: MakeService, fake: FakeSlackServer, model
) -> None:
    model.add(text("Through the storm."))
    # Slack's Retry-After is whole seconds; the outbox's cap on a wait is injected here.
    service = await make_service(pacing=Pacing.unpaced(max_retry_after_s=0.02))
    adapter = slack_of(service)
    fake.rate_limit_next("chat.postMessage", count=4, retry_after=1)
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "hello")
    await until(lambda: texts(fake, dm) == ["Through the storm."])
    assert fake.count_429 == 4
    await adapter.drain()
    assert texts(fake, dm) == ["Through the storm."]


async def test_a_reply_met_by_slacks_edge_in_plain_text_is_sent_when_it_answers_again(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """A 503 in plain text failed the reply for good as an unsendable payload: the
    AttributeError of reading a JSON error from text (found by review)."""
    await make_service(pacing=Pacing.unpaced(backoff_s=(0.01,)))
    fake.edge_error_next("chat.postMessage", count=2)
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "hello")
    await until(lambda: texts(fake, dm) == ["echo: hello"])
    assert len(fake.calls_to("chat.postMessage")) == 3


async def test_a_rate_limit_told_in_the_answers_body_is_waited_out(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """chat.postMessage's ``rate_limited`` ("Application has posted too many messages")
    comes with a 200: read as a refusal, it failed the reply for good (found by review)."""
    await make_service(pacing=Pacing.unpaced(backoff_s=(0.01,), max_retry_after_s=0.02))
    fake.fail_next("chat.postMessage", "rate_limited", count=2)
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "hello")
    await until(lambda: texts(fake, dm) == ["echo: hello"])
    assert len(fake.calls_to("chat.postMessage")) == 3


async def test_a_429_on_another_method_holds_no_reply(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """Slack limits each method apart: a 429 on conversations.open (the owner's DM
    opened to tell of a pairing request) paused every call of the app, and an allowed
    person's reply waited its retry-after (found by review)."""
    await make_service(pacing=Pacing.unpaced())
    alice = fake.dm_channel(ALICE)
    fake.dm(ALICE, "warm")  # her name known: no lookup on the path
    await until(lambda: texts(fake, alice) == ["echo: warm"])
    fake.rate_limit_next("conversations.open", retry_after=60)
    fake.dm(BOB, "let me in")  # a stranger: the owner is to be told in their DM
    await until(lambda: fake.count_429 == 1)
    fake.dm(ALICE, "hello")
    await until(lambda: texts(fake, alice) == ["echo: warm", "echo: hello"])
    assert fake.count_429 == 1  # conversations.open still waits its minute, alone


def test_a_cut_replys_reference_links_keep_their_addresses() -> None:
    """Cut into messages, "[the docs][1]" in one and "[1]: https://…" in another: Slack
    showed "[the docs][1]" and no address at all (found by review on 2026-12-07)."""
    reply = "See [the docs][1].\n\n" + ("word " * 1200) + "\n\n[1]: https://example.com/docs"
    parts = mrkdwn_parts(reply, limit=3000)
    assert len(parts) > 1
    assert "<https://example.com/docs|the docs>" in parts[0]
