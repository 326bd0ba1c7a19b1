"""Telegram's taps routed by the prefix of their data, answered once."""

from __future__ import annotations

import pytest

from bot.telegram.dispatch.callbacks import CallbackRouter, OneAnswer


async def test_a_tap_goes_to_the_handler_of_its_prefix_else_to_the_fallback() -> None:
    seen: list[tuple[str, str]] = []

    def handler(name: str):
        async def handle(tap: str, answer) -> None:
            seen.append((name, tap))
            await answer(name)

        return handle

    router: CallbackRouter[str] = CallbackRouter(handler("fallback"))
    router.on("ap1:", handler("cards"))
    router.on("jb1:", handler("jobs"), when=lambda tap: tap != "nobody")
    router.on("jb1:", handler("jobs, filtered"))
    answers: list[str | None] = []

    async def send(text: str | None) -> None:
        answers.append(text)

    for data, tap in [("ap1:1:a", "a"), ("jb1:2:p", "b"), ("jb1:2:p", "nobody"), ("zz", "c")]:
        await router.dispatch(data, tap, OneAnswer(send))
    assert seen == [("cards", "a"), ("jobs", "b"), ("jobs, filtered", "nobody"), ("fallback", "c")]
    assert answers == ["cards", "jobs", "jobs, filtered", "fallback"]
    with pytest.raises(ValueError, match="routed twice"):
        router.on("ap1:", handler("again"))


async def test_a_tap_is_answered_once() -> None:
    sent: list[str | None] = []

    async def send(text: str | None) -> None:
        sent.append(text)

    answer = OneAnswer(send)
    assert await answer("first") and not await answer("second") and not await answer(None)
    assert sent == ["first"] and answer.sent
