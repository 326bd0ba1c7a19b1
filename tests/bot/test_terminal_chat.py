"""``chathub chat`` as a user runs it: a subprocess, stdin/stdout, the fake model over HTTP."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bot.platform.commands import Command, CommandContext
from bot.terminal import TerminalChat, TerminalRenderer
from engine.session import Done, Question, TextDelta
from tests.bot.process import free_port, service_env, wait_for, wait_for_http
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.terminal import PtySession


def _run_chat(tmp_path: Path, fake: FakeOpenAIServer, stdin: str, **env: str) -> str:
    return _chat_process(tmp_path, fake, stdin, **env).stdout


def _chat_process(
    tmp_path: Path, fake: FakeOpenAIServer, stdin: str, *, ends_well: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "chat"],
        input=stdin,
        capture_output=True,
        text=True,
        env=_environment(tmp_path, fake, **env),
        cwd=tmp_path,
        timeout=30,
    )
    assert done.returncode == 0 or not ends_well, done.stderr
    return done


def _environment(tmp_path: Path, fake: FakeOpenAIServer, **env: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "LLM_BASE_URL": fake.base_url,
        "LLM_MODEL": "fake-model",
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'data' / 'chathub.db'}",
        "CHATHUB_WORKSPACE": str(tmp_path / "workspace"),
        "CHATHUB_TIMEZONE": "UTC",
        # The fact deriver would ask the model after a turn (as service_env says).
        "MEMORY_DERIVE_FACTS": os.environ.get("MEMORY_DERIVE_FACTS", "false"),
        **env,
    }


def test_a_multi_turn_conversation_with_tool_calls(tmp_path: Path, fake_openai: FakeOpenAIServer):
    fake_openai.reply_tool_calls(
        ("call_w", "write_file", {"path": "notes/todo.txt", "content": "buy milk\n"})
    )
    fake_openai.reply_text("Saved your list to notes/todo.txt.")
    fake_openai.reply_tool_calls(("call_r", "read_file", {"path": "notes/todo.txt"}))
    fake_openai.reply_text("It says: buy milk.")

    # Under the default rules both file tools ask first: each "y" answers the prompt
    # shown, and the line in between waits for its own turn.
    out = _run_chat(tmp_path, fake_openai, "remember: buy milk\ny\nwhat is on my list?\ny\n")

    assert (tmp_path / "workspace" / "notes" / "todo.txt").read_text() == "buy milk\n"
    assert "⚙ write_file" in out
    assert "⚠ write_file wants to write notes/todo.txt" in out and "(new file)" in out
    assert "✓ read_file: buy milk" in out
    assert "Saved your list to notes/todo.txt." in out
    assert "It says: buy milk." in out
    # The fourth request carries the whole conversation: both user turns, both tool rounds.
    last = fake_openai.requests[-1]["messages"]
    roles = [m["role"] for m in last]
    assert roles[0] == "system" and roles[-1] == "system"
    assert [m["content"] for m in last if m["role"] == "user"] == [
        "remember: buy milk",
        "what is on my list?",
    ]
    tool_results = [m["content"] for m in last if m["role"] == "tool"]
    assert tool_results[1] == "buy milk\n"
    assert fake_openai.requests[-1]["stream"] is True


def test_the_conversation_survives_a_restart(tmp_path: Path, fake_openai: FakeOpenAIServer):
    fake_openai.reply_text("Nice to meet you, Ada.")
    _run_chat(tmp_path, fake_openai, "my name is Ada\n")
    fake_openai.reply_text("You are Ada.")
    out = _run_chat(tmp_path, fake_openai, "who am I?\n")
    assert "You are Ada." in out
    users = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["my name is Ada", "who am I?"]


def test_every_model_failing_shows_an_error_and_keeps_the_message(
    tmp_path: Path, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_error(500, model="fake-model")
    fake_openai.reply_error(503, model="backup")
    out = _run_chat(tmp_path, fake_openai, "hello?\n", LLM_FALLBACK_MODELS="backup")
    assert "! fake-model failed" in out
    assert "Every model failed" in out
    fake_openai.reply_text("Hello again.")
    out = _run_chat(tmp_path, fake_openai, "hello?\n", LLM_FALLBACK_MODELS="backup")
    assert "Hello again." in out


def test_a_missing_model_stops_start_up_naming_the_variable(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "chat"],
        input="",
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        cwd=tmp_path,
        timeout=30,
    )
    assert done.returncode != 0
    assert "LLM_MODEL" in done.stderr


def test_commands_are_the_platform_layers(tmp_path: Path, fake_openai: FakeOpenAIServer):
    out = _run_chat(tmp_path, fake_openai, "/help\n/models\n/frobnicate\n/stop\n/new\n")
    assert "/model <N|name|auto> — Choose a model" in out  # the words Telegram shows
    assert "/quit — leave" in out
    assert "1. fake-model" in out
    assert "Unknown command /frobnicate." in out
    assert "Nothing to stop." in out
    assert "New conversation (session" in out
    assert not fake_openai.requests  # no command reached the model


def test_an_approval_prompt_is_the_cards_content(tmp_path: Path, fake_openai: FakeOpenAIServer):
    fake_openai.reply_tool_calls(("call_x", "execute_cmd", {"command": "echo hi"}))
    fake_openai.reply_text("Done.")
    out = _run_chat(tmp_path, fake_openai, "say hi\nt\n")
    assert "⚠ execute_cmd wants to run" in out and "$ echo hi" in out
    assert "[t] 15 min" in out
    assert "✓ execute_cmd: hi" in out
    assert "Done." in out


def test_the_log_goes_to_a_file_not_between_the_prompt_and_the_answer(
    tmp_path: Path, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_error(500, model="fake-model")
    stderr = _chat_process(tmp_path, fake_openai, "hello?\n").stderr

    log = tmp_path / ".local" / "state" / "chathub" / "chathub.log"
    assert f"the log is in {log}" in stderr
    assert "WARNING" not in stderr and "ERROR" not in stderr, stderr
    assert "WARNING" in log.read_text() or "ERROR" in log.read_text()


def test_a_models_escapes_never_drive_the_terminal() -> None:
    """Every text a model wrote reaches the terminal as text: its answer (streamed or
    whole) and its question; an escape could set the title, write the clipboard (OSC 52)
    or hide what came before (found by review: only streamed text was shown plainly)."""
    out = io.StringIO()
    render = TerminalRenderer(out)
    hostile = "ok\r\x1b[2K\x1b]52;c;cm0gLXJmIH4=\x07 done\nline two"
    render(Done(content=hostile, message_id=1))  # a whole answer: nothing streamed
    render(Question(request_id=2, question=hostile, session_id=1))
    render(TextDelta(text=hostile))
    render(Done(content=hostile, message_id=3))
    shown = out.getvalue()
    assert "\x1b" not in shown and "\r" not in shown and "\x07" not in shown
    assert shown.count("line two") == 3  # the line breaks are kept, as text


def test_an_answer_is_written_as_its_language_and_its_emoji_are() -> None:
    """The escaping meant for cards showed a Persian answer's zero-width non-joiner, an
    emoji's joiners and a flag's tags as codes (found by review on 2026-12-07); what a
    terminal acts on, and a bidi override, are still shown as codes."""
    out = io.StringIO()
    render = TerminalRenderer(out)
    persian = "می\u200cخواهم"
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    scotland = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    render(TextDelta(text=f"{persian} {family} {scotland} \u202eevil\x1b[2J"))
    render(Done(content="", message_id=1))
    shown = out.getvalue()
    assert f"{persian} {family} {scotland} " in shown
    assert "\\u202e" in shown and "\\x1b" in shown and "\x1b" not in shown


def test_chathub_chat_has_long_term_memory(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    """`chathub chat` ran no memory: /memory said it was switched off and /forget_me
    deleted nothing, though the service had stored facts (found by review on 2026-12-07)."""
    fake_openai.reply_tool_calls(("m1", "memory_save", {"fact": "Ada likes tea."}))
    fake_openai.reply_text("Noted.")
    out = _run_chat(tmp_path, fake_openai, "remember I like tea\n/memory\n/search tea\n")
    assert "Long-term memory is switched off." not in out
    assert "What I remember about you in this chat (1):\n1. Ada likes tea." in out
    assert "Found in this chat's past conversations:" in out and "remember I like [tea]" in out


def test_a_terminal_that_is_not_utf8_chats(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    """A Latin-1 terminal: the banner's "—" raised UnicodeEncodeError before the first
    prompt (found by review on 2026-12-07)."""
    fake_openai.reply_text("Bonjour — ça va ?")
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "chat"],
        input="salut\n".encode("latin-1"),
        capture_output=True,
        env={**service_env(tmp_path, fake_openai.base_url), "PYTHONIOENCODING": "latin-1"},
        cwd=tmp_path,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr.decode("latin-1")[-1500:]
    assert "Bonjour ? ça va ?" in done.stdout.decode("latin-1")


async def test_a_commands_reply_is_shown_as_text() -> None:
    """A fact ``/memory`` lists or a job ``/jobs`` names may be a model's words."""
    out = io.StringIO()
    chat = TerminalChat(None, None, stdout=out)  # type: ignore[arg-type]

    async def hostile(context: CommandContext) -> str:
        return "fact: \x1b]0;owned\x07 likes tea\nfact two"

    chat.commands.register(Command("facts", "a model's facts", hostile))
    await chat._command("/facts")
    assert out.getvalue() == "fact: \\x1b]0;owned\\u0007 likes tea\nfact two\n"


def test_a_card_whose_call_holds_a_lone_surrogate_is_shown_and_answered(
    tmp_path: Path, fake_openai: FakeOpenAIServer
):
    """A model's "\\ud83d" (a token that cut an emoji) in a call's arguments could not be
    written to the screen: the event pump died, and ``chathub chat`` hung for good, Ctrl-C
    too (found by review)."""
    fake_openai.reply_tool_calls(("c1", "execute_cmd", '{"command": "echo \\ud83d done"}'))
    fake_openai.reply_text("Not run, then.")
    out = _run_chat(tmp_path, fake_openai, "say it\nn\n")
    assert "$ echo \\ud83d done" in out and "Not run, then." in out


@pytest.mark.parametrize("locale", ["utf-8", "C"])
def test_a_line_that_is_no_utf8_is_read_and_the_next_answered(
    tmp_path: Path, fake_openai: FakeOpenAIServer, locale: str
) -> None:
    """A Latin-1 paste: in a UTF-8 locale the reader thread died and the chat waited for
    ever; in the C locale its byte reached the database as a surrogate and ended the chat
    with a traceback (found by review on 2026-12-06)."""
    fake_openai.reply_text("answer one")
    fake_openai.reply_text("answer two")
    env = {"PYTHONIOENCODING": "utf-8:strict"} if locale == "utf-8" else {"LC_ALL": "C"}
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "chat"],
        input=b"caf\xe9\nhello\n",
        capture_output=True,
        env={**service_env(tmp_path, fake_openai.base_url), **env},
        cwd=tmp_path,
        timeout=30,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert (done.returncode, "Traceback" in err) == (0, False), err
    assert "answer one" in out and "answer two" in out
    assert "caf\ufffd" in json.dumps(fake_openai.requests[0], ensure_ascii=False)


def test_ctrl_c_at_the_prompt_of_serve_stops_it_gracefully(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """It raised KeyboardInterrupt into the loop: the service's stop never ran, and
    uvicorn printed a traceback into the chat (found by review on 2026-12-06)."""
    fake_openai.reply_text("Hello there.")
    env = service_env(tmp_path, fake_openai.base_url, HTTP_PORT=str(free_port()))
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    argv = [sys.executable, "-m", "bot.cli", "-v", "serve"]
    with PtySession(argv, cwd=tmp_path, env=env, timeout_s=30) as term:
        term.expect("› ")
        term.send("hi")
        term.expect("Hello there.")
        term.expect("› ")
        term.ctrl_c()
        assert term.wait(timeout_s=20) == 0
    assert "Traceback" not in term.output
    log = tmp_path / ".local" / "state" / "chathub" / "chathub.log"
    assert "chathub stopped" in log.read_text()


def test_what_uvicorn_logs_goes_to_the_file_not_into_the_chat(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """A port scanner or a TLS client on the plain port: uvicorn's own stderr handler
    printed "Invalid HTTP request received." between the prompt and the answer (found by
    review on 2026-12-06)."""
    port = free_port()
    env = service_env(tmp_path, fake_openai.base_url, HTTP_PORT=str(port))
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    with PtySession([sys.executable, "-m", "bot.cli", "serve"], cwd=tmp_path, env=env) as term:
        term.expect("› ")
        wait_for_http(port)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as junk:
            junk.sendall(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03 not http\r\n\r\n")
            junk.recv(1000)
        log = tmp_path / ".local" / "state" / "chathub" / "chathub.log"
        wait_for(lambda: "Invalid HTTP request" in log.read_text(), 10)
        term.send("/quit")
        assert term.wait(timeout_s=20) == 0
    assert "Invalid HTTP request" not in term.output


def test_a_second_chathub_chat_on_one_database_is_refused(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    """Two terminals on one conversation: the second took the first one's live turn for
    one a crash had cut and ran it again (found by review on 2026-12-07)."""
    fake_openai.reply_text("Hello.")
    first = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(tmp_path, fake_openai),
        cwd=tmp_path,
    )
    try:
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write("hi\n")
        first.stdin.flush()
        while "Hello." not in first.stdout.readline():  # the first one chats
            pass
        second = _chat_process(tmp_path, fake_openai, "hi again\n", ends_well=False)
        assert second.returncode != 0
        assert "Another chathub chat (pid" in second.stderr and "one at a time" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.kill()
        first.wait()
    assert "hi again" not in json.dumps(fake_openai.requests)
