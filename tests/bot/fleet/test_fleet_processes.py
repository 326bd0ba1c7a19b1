"""Three ``chathub serve`` processes on one PostgreSQL, against the fake Bot API and the fake
model: while one process after another is killed with ``kill -9`` and started again, every
message of every chat is answered, in order; the poller's process dies and another polls,
losing and doubling nothing; a process paused past its lease (mid-turn, or between
recording a reply and sending it) sends no second reply; every connection to the database
dropped under load (PostgreSQL restarted, as the clients see it) loses nothing; a dead
process's approval card is approved with its old button and the command runs once on
another; ``/stop`` reaches the turn on the process that runs it.

PostgreSQL only (``CHATHUB_TEST_POSTGRES_URL``): a fleet shares its work through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.hub.fleet.ownership import pick
from tests.bot.process import free_port, service_env, wait_for
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage
from tests.pg import POSTGRES_URL_ENV, fresh_postgres_database

pytestmark = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV), reason=f"{POSTGRES_URL_ENV} is not set"
)

CHATS = [1000 + n for n in range(24)]  # private chats: the chat id is the user's
PER_CHAT = 5
RECEIVER = "telegram:receiver"
LIVE = "expires_at > extract(epoch from clock_timestamp())"


class Fleet:
    """``chathub serve`` processes sharing one database, each with a home of its own."""

    def __init__(
        self,
        tmp_path: Path,
        url: str,
        telegram: FakeTelegramServer,
        fake: FakeOpenAIServer,
        *,
        allowed: list[int] = CHATS,
        lease_seconds: float = 5.0,
        verbose: bool = True,
    ) -> None:
        self.tmp_path, self.url, self.telegram, self.fake = tmp_path, url, telegram, fake
        self.allowed, self.lease_seconds, self.verbose = allowed, lease_seconds, verbose
        self.children: dict[str, subprocess.Popen[str]] = {}
        self.ids: dict[str, str] = {}  # name -> CHATHUB_PROCESS_ID of its current start
        self.killed: list[str] = []  # the process ids killed with kill -9
        self.starts = 0

    def start(self, name: str, **extra_env: str) -> subprocess.Popen[str]:
        self.starts += 1
        self.ids[name] = f"{name}-{self.starts}"
        home = self.tmp_path / name
        home.mkdir(exist_ok=True)
        log = open(home / f"serve-{self.starts}.log", "w")  # noqa: SIM115 - the child's
        env = service_env(
            home,
            self.fake.base_url,
            DATABASE_URL=self.url,
            CHATHUB_FLEET="true",
            CHATHUB_PROCESS_ID=self.ids[name],
            CHATHUB_FLEET_LEASE_SECONDS=str(self.lease_seconds),
            **{
                "TELEGRAM_BOT_TOKEN": "123456:TEST",
                "TELEGRAM_API_URL": self.telegram.base_url,
                "TELEGRAM_ALLOWED_USER_IDS": ",".join(str(c) for c in self.allowed),
                "HTTP_PORT": str(free_port()),
                "MEMORY_ENABLED": "false",
                **extra_env,  # a platform's own (TELEGRAM_BOT_TOKEN="": no Telegram)
            },
        )
        child = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", *(["--verbose"] if self.verbose else []), "serve"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=home,
            env=env,
        )
        log.close()
        self.children[name] = child
        return child

    def kill(self, name: str) -> None:
        child = self.children[name]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        self.killed.append(self.ids[name])

    def name_of(self, owner: str | None) -> str | None:
        """The name whose current start holds ``owner`` (``<process id>:<suffix>``)."""
        if owner is None:
            return None
        return next((n for n, pid in self.ids.items() if owner.rsplit(":", 1)[0] == pid), None)

    def holder(self, lease: str) -> str | None:
        rows = self.psql(f"SELECT owner FROM leases WHERE name = '{lease}' AND {LIVE}")
        return rows[0][0] if rows else None

    def members(self) -> list[str]:
        rows = self.psql(f"SELECT owner FROM leases WHERE name LIKE 'process:%' AND {LIVE}")
        return [row[0] for row in rows]

    def ready(self, names: list[str], within_s: float = 60) -> None:
        """Until each of ``names``'s current start is a member and someone polls."""

        def joined() -> bool:
            current = {self.name_of(owner) for owner in self.members()}
            return set(names) <= current and self.holder(RECEIVER) is not None

        wait_for(joined, within_s)

    def psql(self, query: str) -> list[list[str]]:
        dsn = self.url.replace("postgresql+asyncpg://", "postgresql://")
        done = subprocess.run(
            ["psql", dsn, "-At", "-F", "\t", "-c", query], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return [line.split("\t") for line in done.stdout.splitlines() if line]

    def close(self) -> None:
        for child in self.children.values():
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)

    def state(self) -> str:
        """The fleet's tables as psql shows them (for a failure's report)."""
        dsn = self.url.replace("postgresql+asyncpg://", "postgresql://")
        queries = (
            "SELECT name, owner, epoch, expires_at > extract(epoch from clock_timestamp()) AS live FROM leases ORDER BY name",
            "SELECT source, count(*) FROM queued_messages GROUP BY source ORDER BY source",
            "SELECT count(*) AS updates, count(handled_at) AS handled FROM platform_events",
            "SELECT s.source, h.role, h.status, count(*) FROM chat_history h "
            "JOIN chat_sessions_stack k ON k.id = h.session_stack_id "
            "JOIN chat_sessions s ON s.id = k.session_id WHERE k.depth = 0 "
            "GROUP BY 1, 2, 3 HAVING count(*) > 5 ORDER BY 1, 2, 3",
        )
        out = []
        for query in queries:
            done = subprocess.run(["psql", dsn, "-c", query], capture_output=True, text=True)
            out.append(done.stdout + done.stderr)
        return "\n".join(out)

    def diagnosis(self) -> str:
        """A few lines first in a failure's report (a long report is cut in the middle):
        how far the work got in each table, the model's requests, and every process's
        warnings and errors."""
        counts = {
            "updates/handled": "SELECT count(*) || '/' || count(handled_at) FROM platform_events",
            "queued": "SELECT count(*) FROM queued_messages",
            "history": "SELECT string_agg(role || '=' || n, ' ') FROM "
            "(SELECT role, count(*) AS n FROM chat_history GROUP BY role ORDER BY role) r",
            "outbox": "SELECT string_agg(status || '=' || n, ' ') FROM "
            "(SELECT status, count(*) AS n FROM platform_outbox GROUP BY status "
            "ORDER BY status) o",
            "live sources": f"SELECT count(*) FROM leases WHERE name LIKE 'source:%' AND {LIVE}",
        }
        lines = [f"{label}: {self.psql(query)}" for label, query in counts.items()]
        lines.append(f"model requests: {len(self.fake.requests)}")
        for path in sorted(self.tmp_path.glob("*/serve-*.log")):
            noted = [
                line
                for line in path.read_text().splitlines()
                if " WARNING " in line or " ERROR " in line or "Traceback" in line
            ]
            lines.append(f"--- {path.relative_to(self.tmp_path)}: {len(noted)} warnings/errors")
            lines.extend(line[:300] for line in noted[:12])
        return "\n".join(lines)

    def logs(self) -> str:
        """The end of every process's log (for a failure's report)."""
        return "\n".join(
            f"--- {path.relative_to(self.tmp_path)}\n{path.read_text()[-3000:]}"
            for path in sorted(self.tmp_path.glob("*/serve-*.log"))
        )

    def log_of(self, name: str) -> str:
        """The whole log of ``name``'s current start."""
        return (self.tmp_path / name / f"serve-{self.ids[name].rsplit('-', 1)[1]}.log").read_text()


@pytest.fixture
def fleet(tmp_path: Path, fake_openai: FakeOpenAIServer) -> Iterator[Fleet]:
    fake_openai.echo = True
    with fleet_on_fresh_database(tmp_path, fake_openai) as fleet:
        yield fleet


@contextlib.contextmanager
def fleet_on_fresh_database(tmp_path: Path, fake: FakeOpenAIServer) -> Iterator[Fleet]:
    """A ``Fleet`` over a new PostgreSQL database and a fake Bot API, closed after."""
    telegram = FakeTelegramServer().start()

    async def database() -> tuple[str, object]:
        manager = fresh_postgres_database(migrated=True)
        url = await manager.__aenter__()
        return url, manager

    loop = asyncio.new_event_loop()
    url, manager = loop.run_until_complete(database())
    fleet = Fleet(tmp_path, url, telegram, fake)
    try:
        yield fleet
    finally:
        fleet.close()
        telegram.stop()
        loop.run_until_complete(manager.__aexit__(None, None, None))  # type: ignore[attr-defined]
        loop.close()


def replies(telegram: FakeTelegramServer, chat: int) -> list[str]:
    return [m.text for m in telegram.messages(chat) if (m.text or "").startswith("echo: ")]


def doubled_replies(fleet: Fleet, chat: int) -> list[tuple[str, set[str]]]:
    """Each reply the chat got more than once (once per extra copy), with the processes
    that had its outbox row in flight: the one that recorded it and the last one that
    claimed it to send it again (their start's id, as ``Fleet.killed`` names them)."""
    texts = replies(fleet.telegram, chat)
    extra = [text for text, n in Counter(texts).items() for _ in range(n - 1)]
    if not extra:
        return []
    rows = fleet.psql(
        f"SELECT recorded_by, coalesce(sending_by, ''), payload FROM platform_outbox "
        f"WHERE conversation = '{chat}' AND recorded_by IS NOT NULL"
    )
    senders: dict[str, set[str]] = {}
    for recorded_by, sending_by, payload in rows:
        text = json.loads(payload).get("text", "")
        for process in filter(None, (recorded_by, sending_by)):
            senders.setdefault(text, set()).add(process.rsplit(":", 1)[0])
    return [(text, senders.get(text, set())) for text in extra]


def answered(telegram: FakeTelegramServer, chat: int) -> list[str]:
    """The chat's messages as its replies echo them, in order (a reply answers every
    message that came before it since the last one: those steered into its turn)."""
    return [
        said
        for reply in replies(telegram, chat)
        for part in reply[6:].split(" | ")
        for said in part.split("\n\n")  # steered messages join their turn's user message
    ]


@pytest.mark.timeout(400)
def test_every_message_is_answered_once_in_order_while_processes_are_killed(
    fleet: Fleet,
) -> None:
    for name in ("p1", "p2", "p3"):
        fleet.start(name)
    wait_for(lambda: fleet.telegram.calls_to("getUpdates"), within_s=30)  # someone polls
    victims = ["p1", "p2", "p3"]
    sent = 0
    try:
        for k in range(PER_CHAT):
            for chat in CHATS:
                fleet.telegram.user_message(chat, chat, f"chat {chat} message {k}")
                sent += 1
            time.sleep(1.0)  # the kill loop's pace: a burst, then a kill
            victim = victims[k % 3]
            fleet.kill(victim)
            fleet.start(victim)

        def all_answered() -> bool:
            return all(len(answered(fleet.telegram, chat)) >= PER_CHAT for chat in CHATS)

        wait_for(all_answered, within_s=120)
        time.sleep(2.0)  # a doubled reply would come now
    except AssertionError:
        counts = {chat: len(answered(fleet.telegram, chat)) for chat in CHATS}
        print("answered per chat:", counts)
        print(fleet.diagnosis())
        print(fleet.state())
        for chat in (c for c, n in counts.items() if n < PER_CHAT):
            print(chat, replies(fleet.telegram, chat))
            print(
                fleet.psql(
                    "SELECT h.id, h.role, h.status, replace(left(h.content, 80), chr(10), ' ') "
                    "FROM chat_history h JOIN chat_sessions_stack k ON k.id = h.session_stack_id "
                    f"JOIN chat_sessions s ON s.id = k.session_id WHERE s.source = 'telegram:{chat}' "
                    "ORDER BY h.id"
                )
            )
            print(
                fleet.psql(
                    "SELECT id, status, dedupe_key, attempts, recorded_by, next_attempt_at, "
                    "created_at, sent_at, error FROM platform_outbox "
                    f"WHERE conversation = '{chat}' ORDER BY id"
                )
            )
        print(fleet.logs())
        raise
    doubled = 0
    for chat in CHATS:
        got = answered(fleet.telegram, chat)
        expected = [f"chat {chat} message {k}" for k in range(PER_CHAT)]
        if list(dict.fromkeys(got)) != expected:
            print("killed:", fleet.killed)
            print(outbox_of(fleet, chat))
        assert list(dict.fromkeys(got)) == expected, (chat, replies(fleet.telegram, chat))
        # A reply sent twice: only where the process sending it was killed between
        # Telegram taking the send and the process marking it sent (no client can close
        # that window), and another process re-sent the row after it died.
        for text, senders in doubled_replies(fleet, chat):
            doubled += 1
            assert senders & set(fleet.killed), (chat, text, senders)
    print(
        f"\n{len(CHATS)} chats x {PER_CHAT} messages, {len(fleet.killed)} kills: "
        f"0 lost, {doubled} sent twice (killed between sending and recording it)"
    )
    assert sent == len(CHATS) * PER_CHAT


def outbox_of(fleet: Fleet, chat: int) -> str:
    """``chat``'s outbox rows as psql shows them (for a failure's report)."""
    rows = fleet.psql(
        "SELECT id, status, dedupe_key, attempts, recorded_by, sending_by, "
        "next_attempt_at, created_at, sent_at, error FROM platform_outbox "
        f"WHERE conversation = '{chat}' ORDER BY id"
    )
    return "\n".join(" | ".join(row) for row in rows)


def owner_of(fleet: Fleet, chat: int) -> str | None:
    rows = fleet.psql(
        f"SELECT owner FROM leases WHERE name = 'source:telegram:{chat}' "
        "AND expires_at > extract(epoch from clock_timestamp())"
    )
    return rows[0][0] if rows else None


@pytest.mark.timeout(120)
def test_a_process_paused_past_its_lease_sends_no_second_reply(fleet: Fleet) -> None:
    """SIGSTOP the process whose turn waits for a slow model, past its lease: another
    process takes the chat over and answers; the paused one, continued, finds its lease
    gone and its late answer rolls back."""
    chat = CHATS[0]
    for name in ("p1", "p2"):
        fleet.start(name)
    wait_for(lambda: fleet.telegram.calls_to("getUpdates"), within_s=30)
    fleet.fake.reply_text("the paused process's late answer", delay_s=8.0)
    fleet.telegram.user_message(chat, chat, "hello")
    owner = wait_for(lambda: owner_of(fleet, chat), within_s=20)
    paused = next(n for n, pid in fleet.ids.items() if owner.startswith(pid + ":"))
    wait_for(lambda: len(fleet.fake.requests) >= 1, within_s=20)  # its model call is out
    fleet.children[paused].send_signal(signal.SIGSTOP)
    try:
        # The lease (5 s) runs out; the other process resumes the turn (echo, at once).
        wait_for(lambda: replies(fleet.telegram, chat), within_s=40)
    finally:
        fleet.children[paused].send_signal(signal.SIGCONT)
    time.sleep(10.0)  # the late answer came back meanwhile: it must not reach the chat
    texts = [m.text for m in fleet.telegram.messages(chat)]
    assert replies(fleet.telegram, chat) == ["echo: hello"], texts
    assert "the paused process's late answer" not in " ".join(t or "" for t in texts)
    assert not [t for t in texts if (t or "").startswith("⚠️")], texts


def stopped(child: subprocess.Popen[str]) -> bool:
    """Whether ``child`` is stopped (SIGSTOP): its state in /proc is ``T``."""
    stat = Path(f"/proc/{child.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.timeout(120)
def test_a_process_paused_between_recording_and_sending_a_reply_never_sends_it_twice(
    fleet: Fleet,
) -> None:
    """The pause lands after the answer is recorded and before it is sent (a failpoint
    stops the process right there). Another process takes the paused one for dead and
    sends the reply; continued, the paused one finds its membership broke since it took
    the reply, and hands it back instead of sending it a second time."""
    chat = CHATS[0]
    paused = fleet.start("p1", CHATHUB_FAILPOINTS="stop:before_outbox_send")
    wait_for(lambda: fleet.telegram.calls_to("getUpdates"), within_s=30)
    fleet.telegram.user_message(chat, chat, "hello")  # p1 alone: its turn, its reply
    wait_for(lambda: stopped(paused), within_s=30)
    fleet.start("p2")
    try:
        wait_for(lambda: replies(fleet.telegram, chat), within_s=40)
    finally:
        paused.send_signal(signal.SIGCONT)
    p1 = fleet.ids["p1"]
    # Continued, p1 renews, finds its membership lapsed, and joins again.
    wait_for(lambda: "membership lease had lapsed" in fleet.log_of("p1"), within_s=20)
    texts = [m.text for m in fleet.telegram.messages(chat)]
    assert replies(fleet.telegram, chat) == ["echo: hello"], texts
    assert "is left to the fleet" in fleet.log_of("p1")
    assert not [t for t in texts if (t or "").startswith("⚠️")], texts
    [[recorder, sender]] = fleet.psql("SELECT recorded_by, sending_by FROM platform_outbox")
    assert recorder.startswith(p1 + ":") and not sender.startswith(p1 + ":")  # sent by p2
    assert paused.poll() is None  # p1 lives on, and answers the next message
    fleet.telegram.user_message(chat, chat, "again")
    wait_for(lambda: len(replies(fleet.telegram, chat)) == 2, within_s=30)


@pytest.mark.timeout(180)
def test_every_process_reconnects_after_the_database_drops_all_connections(
    fleet: Fleet,
) -> None:
    """PostgreSQL restarted, as the clients see it: every connection of the fleet's
    database is terminated while messages arrive; nothing is lost, nobody sees an error."""
    for name in ("p1", "p2", "p3"):
        fleet.start(name)
    wait_for(lambda: fleet.telegram.calls_to("getUpdates"), within_s=30)
    chats = CHATS[:10]
    for k in range(3):
        for chat in chats:
            fleet.telegram.user_message(chat, chat, f"chat {chat} message {k}")
        time.sleep(0.5)
        fleet.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )

    def all_answered() -> bool:
        return all(len(set(answered(fleet.telegram, chat))) >= 3 for chat in chats)

    try:
        wait_for(all_answered, within_s=90)
    except AssertionError:
        print({chat: answered(fleet.telegram, chat) for chat in chats})
        print(fleet.diagnosis())
        print(fleet.state())
        print(fleet.logs())
        raise
    for chat in chats:
        expected = [f"chat {chat} message {k}" for k in range(3)]
        assert list(dict.fromkeys(answered(fleet.telegram, chat))) == expected
        texts = [m.text or "" for m in fleet.telegram.messages(chat)]
        assert not [t for t in texts if t.startswith("⚠️")], texts
    died = {
        name: child.poll() for name, child in fleet.children.items() if child.poll() is not None
    }
    assert not died, f"{died}\n{fleet.logs()}"  # none died


def button(message: SentMessage, label: str) -> str:
    """The callback data of ``message``'s inline button whose text has ``label``."""
    assert message.reply_markup is not None, message
    for row in message.reply_markup["inline_keyboard"]:
        for key in row:
            if label in key["text"]:
                return str(key["callback_data"])
    raise AssertionError(f"no {label!r} button on {message}")


@pytest.mark.timeout(120)
def test_an_approval_card_of_a_dead_process_is_approved_with_its_old_button_and_runs_once(
    fleet: Fleet, tmp_path: Path
) -> None:
    """p1 asks for approval of a command and is killed; the card's old button, pressed
    afterwards, reaches p2, which takes the chat over and runs the command once."""
    chat = CHATS[0]
    workspace = tmp_path / "shared-workspace"  # as compose shares one volume
    workspace.mkdir()
    fleet.start("p1", CHATHUB_WORKSPACE=str(workspace))
    wait_for(lambda: fleet.telegram.calls_to("getUpdates"), within_s=30)
    fleet.fake.reply_tool_calls(("call_1", "execute_cmd", {"command": "echo run >> runs.log"}))
    fleet.fake.reply_text("the command ran")
    fleet.telegram.user_message(chat, chat, "run the command")
    card = wait_for(
        lambda: next((m for m in fleet.telegram.messages(chat) if m.reply_markup), None),
        within_s=30,
    )
    fleet.kill("p1")
    fleet.start("p2", CHATHUB_WORKSPACE=str(workspace))
    fleet.ready(["p2"])
    fleet.telegram.callback(chat, chat, card.message_id, button(card, "Approve"))
    wait_for(lambda: "the command ran" in texts_of(fleet, chat), within_s=60)
    time.sleep(2.0)  # a second run or reply would come now
    assert (workspace / "runs.log").read_text() == "run\n"
    assert texts_of(fleet, chat).count("the command ran") == 1
    assert not [t for t in texts_of(fleet, chat) if t.startswith("⚠️")]


def texts_of(fleet: Fleet, chat: int) -> list[str]:
    return [m.text or "" for m in fleet.telegram.messages(chat)]


@pytest.mark.timeout(120)
def test_stop_sent_to_a_chat_whose_turn_runs_on_another_process_stops_it(fleet: Fleet) -> None:
    for name in ("p1", "p2"):
        fleet.start(name)
    fleet.ready(["p1", "p2"])
    # Each process reads who the members are at its scans (every second): until the
    # receiver has, it keeps every chat itself.
    time.sleep(2.5)
    receiver = fleet.holder(RECEIVER)
    members = fleet.members()
    # A chat that the rendezvous hashing gives to the process that does not poll.
    chat = next(c for c in CHATS if pick(f"telegram:{c}", members) != receiver)
    fleet.fake.reply_hang()
    fleet.telegram.user_message(chat, chat, "a long job")
    wait_for(lambda: fleet.fake.requests, within_s=30)  # the turn waits for the model
    owner = wait_for(lambda: owner_of(fleet, chat), within_s=20)
    assert owner != receiver
    fleet.telegram.user_message(chat, chat, "/stop")
    wait_for(lambda: "⏹ Stopped." in texts_of(fleet, chat), within_s=20)
    fleet.telegram.user_message(chat, chat, "again")
    wait_for(lambda: replies(fleet.telegram, chat), within_s=30)
    assert replies(fleet.telegram, chat) == ["echo: again"]  # the stopped turn never answered


@pytest.mark.timeout(120)
def test_the_pollers_process_killed_another_polls_and_no_update_is_lost_or_doubled(
    fleet: Fleet,
) -> None:
    for name in ("p1", "p2", "p3"):
        fleet.start(name)
    fleet.ready(["p1", "p2", "p3"])
    receiver = fleet.name_of(fleet.holder(RECEIVER))
    assert receiver is not None
    chats = CHATS[:6]
    fleet.kill(receiver)
    for chat in chats:  # while nobody polls
        fleet.telegram.user_message(chat, chat, f"chat {chat} after the kill")
    # The dead process's receiver lease runs out; another process takes it and polls.
    wait_for(lambda: fleet.name_of(fleet.holder(RECEIVER)) not in (None, receiver), within_s=30)
    wait_for(lambda: all(replies(fleet.telegram, c) for c in chats), within_s=60)
    time.sleep(2.0)  # a doubled answer would come now
    for chat in chats:
        assert replies(fleet.telegram, chat) == [f"echo: chat {chat} after the kill"]
