"""Approval cards on Slack: Block Kit buttons that name their call, a modal for a reason
or an answer, refusals only the clicking person sees."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from bot.delivery import CardRow
from bot.platform.cards import EXPIRED, NOT_ALLOWED, CardContent
from bot.platform.controls import ControlId, parse_control
from bot.platform.open_cards import card_is_live
from bot.slack.cards import (
    CONTEXT_LIMIT,
    QUESTION_CUT,
    card_text,
    parse_metadata,
    question_text,
    resolved_blocks,
)
from bot.slack.sending import PROGRESS_LINE, SlackSender
from engine.approval import Decider
from engine.hub import APPROVE
from engine.llm.scripted import text, tool_call
from tests.bot.platform_contract.scripts import shell, tool_results
from tests.bot.slack.conftest import ALICE, BOB, GENERAL, OWNER, MakeService, slack_of, texts, until
from tests.fakes.slack_server import FakeSlackServer, Message


def card_in(fake: FakeSlackServer, channel: str) -> Message | None:
    return next((m for m in fake.messages(channel) if m.buttons), None)


def ephemeral_texts(fake: FakeSlackServer, user: str) -> list[str]:
    return [m.text for m in fake.ephemerals(user)]


def action(card: Message, choice: str) -> str:
    return next(a for a in card.action_ids if a.endswith(f":{choice}"))


@pytest.mark.parametrize(
    "junk",
    [
        None,
        "",
        "card:1:launch",
        "card:0:approve",
        "card:01:approve",
        "card:99999999999999999999:approve",
        "card:-1:approve",
        "card:1",
        "ask:1:approve",
        "x" * 101,
        "card:１:approve",
        "reason:1:extra",
    ],
)
def test_junk_action_ids_name_no_call(junk: object) -> None:
    assert parse_control(junk) is None


@pytest.mark.parametrize(
    "junk", [None, "", "{", "[]", '{"c": "C1"}', '{"c": "C0X", "m": "now"}', "x" * 300]
)
def test_junk_modal_metadata_names_no_card(junk: object) -> None:
    assert parse_metadata(junk) is None


def test_a_huge_call_fits_a_section_and_says_it_is_cut() -> None:
    shown = CardContent(
        "execute_cmd", "main", 0, "Command", "echo <!channel> ```x``` &\n" * 500, "sh"
    )
    body = card_text(shown)
    assert len(body) <= 3000 and "Cut" in body
    assert "<!channel>" not in body and "&lt;!channel&gt;" in body  # never a ping
    assert body.count("```") == 2  # the call's own backticks cannot close the block


def test_a_card_is_live_only_open_in_its_channel_on_its_message() -> None:
    card = CardRow(5, "approval", "slack:D0ALICE", "D0ALICE", "1.000002", "x", None, "open")
    assert card_is_live(card, "approval", "D0ALICE", "1.000002")
    assert not card_is_live(card, "approval", "C0OTHER", "1.000002")
    assert not card_is_live(card, "approval", "D0ALICE", "1.000003")
    assert not card_is_live(card, "question", "D0ALICE", "1.000002")
    assert not card_is_live(replace(card, state="resolved"), "approval", "D0ALICE", "1.000002")
    assert not card_is_live(None, "approval", "D0ALICE", "1.000002")


async def test_approve_runs_the_call_and_the_card_loses_its_buttons(
    fake: FakeSlackServer, make_service: MakeService, model
) -> None:
    model.add(shell("echo hi"), text("Ran it."))
    await make_service()
    asked = fake.mention(GENERAL, ALICE, "run it")
    await until(lambda: card_in(fake, GENERAL) is not None)
    card = card_in(fake, GENERAL)
    assert card is not None and card.thread_ts == asked.ts
    assert [b["text"]["text"] for b in card.buttons] == [
        "✅ Approve",
        "❌ Reject",
        "⏱ 15 min",
        "🔄 Session",
    ]
    fake.click(card, BOB, action(card, "approve"))  # Bob is no allowed decider
    await until(lambda: NOT_ALLOWED in ephemeral_texts(fake, BOB))
    assert fake.message(GENERAL, card.ts).buttons
    click = fake.click(card, ALICE, action(card, "approve"))
    await until(lambda: any(m.text == "Ran it." for m in fake.messages(GENERAL)))
    assert click.acked
    decided = fake.message(GENERAL, card.ts)
    assert decided.buttons == [] and "Approved" in str(decided.blocks)
    assert "alice" in str(decided.blocks).lower()
    assert "hi" in tool_results(model)[0]


async def test_a_double_click_on_approve_leaves_the_card_saying_who_approved(
    fake: FakeSlackServer, make_service: MakeService, model
) -> None:
    """The owner, not met yet, double-clicks ✅: the first click looks up their name while
    the second finds the call decided. The card says "Approved by …" (the second click
    closed it as "Expired" first; found by review)."""
    model.add(shell("echo hi"), text("Ran it."))
    service = await make_service()
    decisions: list[str] = []
    hub_decide = service.hub.decide

    async def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return await hub_decide(*args, **kwargs)
        finally:
            decisions.append("tried")

    service.hub.decide = counted  # type: ignore[method-assign]
    web = slack_of(service).web
    users_info = web.users_info

    async def after_both_clicks(**kwargs: Any) -> Any:  # the first click's name lookup
        if kwargs.get("user") == OWNER:
            await until(lambda: len(decisions) == 2)
        return await users_info(**kwargs)

    web.users_info = after_both_clicks
    fake.mention(GENERAL, ALICE, "run it")
    await until(lambda: (shown := card_in(fake, GENERAL)) is not None and bool(shown.ts))
    card = card_in(fake, GENERAL)
    assert card is not None
    fake.click(card, OWNER, action(card, "approve"))
    fake.click(card, OWNER, action(card, "approve"))
    await until(lambda: fake.message(GENERAL, card.ts).buttons == [])
    closed = str(fake.message(GENERAL, card.ts).blocks)
    assert "Approved" in closed and "Expired" not in closed
    await until(lambda: any(m.text == "Ran it." for m in fake.messages(GENERAL)))


async def test_reject_asks_a_reason_in_a_modal(
    fake: FakeSlackServer, make_service: MakeService, model
) -> None:
    model.add(shell("echo hi"), text("Not run."))
    await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "run it")
    await until(lambda: card_in(fake, dm) is not None)
    card = card_in(fake, dm)
    assert card is not None
    fake.click(card, ALICE, action(card, "reject"))
    await until(lambda: fake.open_views(ALICE))
    view = fake.open_views(ALICE)[0]
    fake.submit_view(view, ALICE, {"text": "not today"})
    await until(lambda: any(m.text == "Not run." for m in fake.messages(dm)))
    decided = fake.message(dm, card.ts)
    assert decided.buttons == [] and "Rejected" in str(decided.blocks)
    assert "not today" in str(decided.blocks)
    assert "not today" in " ".join(tool_results(model))


async def test_forged_stale_and_foreign_clicks_are_refused_only_to_the_clicker(
    fake: FakeSlackServer, make_service: MakeService, model
) -> None:
    model.add(shell("echo hi"), text("Ran it."))
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "run it")
    await until(lambda: card_in(fake, dm) is not None)
    card = card_in(fake, dm)
    assert card is not None
    approve = action(card, "approve")
    fake.click(card, ALICE, approve, value="card:999:approve")  # another call's
    fake.click(card, ALICE, approve, value="<junk>")
    await until(lambda: ephemeral_texts(fake, ALICE) == [EXPIRED, EXPIRED])
    assert fake.message(dm, card.ts).buttons  # nothing was decided
    fake.click(card, ALICE, approve)
    await until(lambda: any(m.text == "Ran it." for m in fake.messages(dm)))
    assert await service.hub.pending_approvals() == []
    await slack_of(service).drain()
    assert [m.text for m in fake.messages(dm)].count("Ran it.") == 1


async def test_a_decision_taken_elsewhere_updates_the_slack_card(
    fake: FakeSlackServer, make_service: MakeService, model
) -> None:
    model.add(shell("echo hi"), text("Done."))
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "run it")
    await until(lambda: (c := card_in(fake, dm)) is not None and c.ts)
    card = card_in(fake, dm)
    assert card is not None
    pending = await service.hub.pending_approvals()
    await service.hub.decide(
        pending[0].tool_call_id,
        APPROVE,
        decider=Decider("owner", is_owner=True, is_allowed=True),
        by="the inbox",
        source=None,
    )
    await until(lambda: fake.message(dm, card.ts).buttons == [])
    assert "Approved" in str(fake.message(dm, card.ts).blocks)
    assert fake.calls_to("chat.update")[-1].params["channel"] == dm  # the DM's D… id
    await until(lambda: any(m.text == "Done." for m in fake.messages(dm)))


def test_action_ids_round_trip() -> None:
    for parsed in (ControlId("card", 7, "bypass_15m"), ControlId("ask", 2**63 - 1)):
        assert parse_control(str(parsed)) == parsed


async def _asked_which_city(
    make_service: MakeService, fake: FakeSlackServer, model
) -> tuple[Any, str, Message]:
    """Alice's DM, where the agent asks "Which city?" (then books Rome): the service,
    the DM and the question's card."""
    model.add(tool_call("ask_user_clarification", '{"question": "Which city?"}', "q"))
    model.add(text("Booking Rome."))
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "book a hotel")
    await until(lambda: any(m.buttons for m in fake.messages(dm)))
    return service, dm, next(m for m in fake.messages(dm) if m.buttons)


async def test_an_answer_over_the_limit_is_refused_and_the_question_still_waits(
    make_service: MakeService, fake: FakeSlackServer, model
) -> None:
    """An answer longer than the hub takes (32,000 characters; Slack takes 40,000)
    closed the question's card as expired while the turn still waited for it: the next,
    short answer went nowhere (found by review)."""
    service, dm, question = await _asked_which_city(make_service, fake, model)
    fake.dm(ALICE, "R" * 33_000)
    await until(lambda: any("the limit is" in t for t in texts(fake, dm)))
    await slack_of(service).drain()
    assert await service.hub.pending_questions()
    assert fake.message(dm, question.ts).buttons  # still answerable
    fake.dm(ALICE, "Rome")
    await until(lambda: "Booking Rome." in texts(fake, dm))


async def test_in_a_dm_a_reply_in_the_questions_own_thread_answers_it(
    make_service: MakeService, fake: FakeSlackServer, model
) -> None:
    """Slack's "Reply in thread" on the question: a DM's thread is its own conversation,
    and the answer began one, out of context, while the question waited (found by
    review). A thread of another message of the DM stays its own conversation."""
    service, dm, question = await _asked_which_city(make_service, fake, model)
    fake.push_event(
        {
            "type": "message",
            "channel": dm,
            "channel_type": "im",
            "user": ALICE,
            "ts": f"{float(question.ts) + 5:.6f}",
            "thread_ts": question.ts,
            "text": "Rome",
        }
    )
    await until(lambda: "Booking Rome." in texts(fake, dm))
    await slack_of(service).drain()
    assert await service.hub.pending_questions() == []
    assert [m.text for m in fake.messages(dm) if m.thread_ts == question.ts] == []


async def test_a_card_names_who_decided_though_their_name_was_not_known_yet(
    make_service: MakeService, fake: FakeSlackServer, model
) -> None:
    """The decider's name was asked after the decision: a quick tool's end closed the
    card first, as "Approved" without who (found by review)."""
    model.add(shell("echo hi"), text("Ran it."))
    await make_service()
    fake.slow("users.info", 0.2)  # the owner has not written to the bot yet
    fake.mention(GENERAL, ALICE, "run it")
    await until(lambda: any(m.buttons and m.ts for m in fake.messages(GENERAL)))
    card = next(m for m in fake.messages(GENERAL) if m.buttons)
    fake.click(card, OWNER, next(a for a in card.action_ids if a.endswith(":approve")))
    await until(lambda: "Ran it." in texts(fake, GENERAL, card.thread_ts or card.ts))
    await until(lambda: "Approved* by owner" in str(fake.message(GENERAL, card.ts).blocks))


def test_a_long_question_is_cut_where_its_markdown_may_be_and_keeps_what_it_asks() -> None:
    """A question over a section was cut at a character count: its code block left open,
    an escape halved ("&am…"), and the question itself, at its end, gone (found by
    review)."""
    code = "\n".join(f"+ line {i} & <x>" for i in range(300))
    shown = question_text(
        f"Here is the diff I plan:\n\n```diff\n{code}\n```\n\nProd or **staging**?"
    )
    assert len(shown) <= 3000
    assert shown.count("```") % 2 == 0
    assert not re.search(r"&[a-z]{0,3}\n", shown)  # every escape whole
    assert shown.endswith("Prod or *staging*?\n" + QUESTION_CUT)
    assert question_text("Which city?") == "*❓ Question*\n\nWhich city?"


def test_a_long_reject_reason_is_cut_before_an_escape_not_inside_one() -> None:
    """The outcome line was escaped, then cut at Block Kit's 2,000: a reason of ``<``s
    ended in ``&l`` (found by review)."""
    card = CardRow(7, "approval", "slack:C1", "C1", "1.1", "Run `ls`?", None, "open")
    [_section, context] = resolved_blocks(card, "reject", "Ann", "<" * 3000)
    line = context["elements"][0]["text"]
    assert len(line) <= CONTEXT_LIMIT
    assert line.endswith("&lt;…"), line[-12:]


def test_a_long_progress_line_is_cut_before_an_escape_not_inside_one() -> None:
    sender = SlackSender(None, None)  # type: ignore[arg-type]  (text alone)
    shown = sender.progress_text(["🔧 shell: " + "<" * 400])
    assert len(shown) <= PROGRESS_LINE
    assert shown.endswith("&lt;…"), shown[-12:]
