"""Socket Mode: the socket comes from apps.connections.open; a disconnect (refresh) or a
dropped socket reconnects through a new one and loses no event; a refused token is one
line, never a retry loop."""

from __future__ import annotations

from tests.bot.slack.conftest import ALICE, MakeService, slack_of, texts, until
from tests.fakes.slack_server import FakeSlackServer


async def test_a_refresh_reconnects_through_a_new_url_and_loses_nothing(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    assert len(fake.calls_to("apps.connections.open")) >= 1
    opened = len(fake.calls_to("apps.connections.open"))
    fake.disconnect_socket("refresh_requested", close_after=0.3)
    fake.dm(ALICE, "during the refresh")
    await until(lambda: len(fake.calls_to("apps.connections.open")) > opened)
    await until(lambda: texts(fake, dm) == ["echo: during the refresh"])
    fake.dm(ALICE, "after it")
    await until(lambda: texts(fake, dm) == ["echo: during the refresh", "echo: after it"])
    await until(lambda: all(d.acked or d.expired for d in fake.deliveries))
    await slack_of(service).drain()
    assert texts(fake, dm) == ["echo: during the refresh", "echo: after it"]
    assert await service.slack.state() == "ok"


async def test_a_dropped_socket_is_noticed_and_what_was_sent_meanwhile_answered(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.drop_socket()
    fake.dm(ALICE, "into the void")  # unacknowledged: Slack sends it again
    await until(lambda: fake.ready_connections >= 1 and len(fake.connections) >= 2)
    await until(lambda: texts(fake, dm) == ["echo: into the void"])
    await slack_of(service).drain()
    assert texts(fake, dm) == ["echo: into the void"]


async def test_a_revoked_bot_token_is_one_line(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    fake.fail_next("auth.test", "token_revoked")
    service = await make_service(ready=False)
    assert service.refused is not None
    line = await service.refused
    assert line == "SLACK_BOT_TOKEN: Slack does not accept this token (token_revoked)"
    assert await service.slack.state() == "refused"
    assert fake.live_connections == 0


async def test_a_bot_token_given_as_the_app_token_is_one_line(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    service = await make_service(ready=False, slack_app_token="xapp-1-wrong-token")
    line = await service.refused
    assert line.startswith("SLACK_APP_TOKEN: Slack does not accept this token")
    assert fake.live_connections == 0


async def test_socket_mode_switched_off_is_one_line(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    fake.socket_mode_enabled = False
    service = await make_service(ready=False)
    line = await service.refused
    assert "SLACK_APP_TOKEN" in line and "socket_mode_disabled" in line


async def test_slack_down_at_start_is_retried(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    fake.fail_next("auth.test", "service_unavailable", status=503, count=2)
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "up again")
    await until(lambda: texts(fake, dm) == ["echo: up again"])
    assert not service.refused.done()


async def test_slacks_edge_answering_in_plain_text_at_start_is_retried(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """A 503 in plain text (Slack's edge, no JSON) raised an AttributeError that ended
    the start-up for good: no socket, /healthz "connecting" for ever (found by review)."""
    fake.edge_error_next("auth.test", count=2)
    service = await make_service()
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "up again")
    await until(lambda: texts(fake, dm) == ["echo: up again"])
    assert not service.refused.done()


async def test_a_message_is_answered_while_auth_test_fails_after_the_start(
    make_service: MakeService, fake: FakeSlackServer
) -> None:
    """Bolt asked auth.test again at its first envelope: when Slack failed that call (a
    5xx, a 429) it acknowledged the envelope with "reinstall this app" and the message
    was never stored, lost (found by review on 2026-12-06). It asks the service, which
    knows already."""
    service = await make_service()
    asked = len(fake.calls_to("auth.test"))
    fake.fail_next("auth.test", "internal_error", status=500, count=5)
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "hello")
    await until(lambda: texts(fake, dm) == ["echo: hello"])
    fake.rate_limit_next("auth.test", count=5)
    fake.dm(ALICE, "again")
    await until(lambda: texts(fake, dm) == ["echo: hello", "echo: again"])
    await slack_of(service).drain()
    assert len(fake.calls_to("auth.test")) == asked  # bolt asked nothing of its own
