"""``chathub providers``: the registry from the shell, keys never shown."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from bot.providers_cli import add_providers_parser, run_providers_command
from tests.fakes.openai_server import FakeOpenAIServer
from tests.pg import migrated_sqlite

KEY = "sk-cli-secret-0123456789"


async def run(url: str, *argv: str, key: str = "") -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    add_providers_parser(parser.add_subparsers(dest="command"))
    out, err = io.StringIO(), io.StringIO()
    status = await run_providers_command(
        parser.parse_args(["providers", *argv]), url, out=out, err=err, read_key=lambda _: key
    )
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return migrated_sqlite(tmp_path / "chathub.db")


async def test_add_list_test_remove(url: str, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.models = ["whisper-1", "gpt-x"]
    fake_openai.api_key = KEY
    status, out, _ = await run(
        url, "add", "local", "--base-url", fake_openai.base_url, "--serves",
        "transcription", "--models", "whisper-1,tts-9", key=KEY,
    )  # fmt: skip
    assert status == 0 and KEY not in out
    status, out, _ = await run(url, "list")
    assert "local" in out and "sk-…6789" in out and KEY not in out
    status, out, _ = await run(url, "test", "local")
    assert status == 0 and "local answers (2 models listed); it does not list tts-9" in out
    status, out, _ = await run(url, "remove", "local")
    assert status == 0 and "Removed local." in out
    assert (await run(url, "list"))[1].strip() == "No providers."


async def test_a_provider_is_named_as_it_was_added(url: str) -> None:
    """Added as "Groq" (stored as groq), removed as "Groq" (it was "no provider named
    'Groq'"; found by review)."""
    base = "https://api.groq.com/openai/v1"
    assert (await run(url, "add", "Groq", "--base-url", base, "--serves", "chat"))[0] == 0
    status, out, err = await run(url, "remove", "Groq")
    assert (status, err) == (0, "") and "Removed groq." in out


async def test_a_provider_listing_no_models_is_added_with_a_note_saying_when_it_is_used(
    url: str,
) -> None:
    """It was accepted and then passed over without a word when no model was configured
    for its job (found by review on 2026-12-07)."""
    base = "https://api.groq.com/openai/v1"
    status, out, _ = await run(url, "add", "groq", "--base-url", base, "--serves", "transcription")
    assert status == 0 and "Note: groq lists no models" in out and "TRANSCRIBE_MODEL" in out
    status, out, _ = await run(
        url, "add", "local", "--base-url", base, "--serves", "speech", "--models", "tts-1"
    )
    assert status == 0 and "Note:" not in out


async def test_a_refused_key_fails_the_test_in_one_line(url: str, fake_openai) -> None:
    fake_openai.api_key = "the-right-one"
    await run(url, "add", "x", "--base-url", fake_openai.base_url, "--serves", "chat", key=KEY)
    status, out, _ = await run(url, "test", "x")
    assert status == 1 and out.strip() == "✗ x refused its key (HTTP 401)"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["add", "x", "--base-url", "file:///etc", "--serves", "chat"], "base_url:"),
        (["add", "x", "--base-url", "http://h/v1", "--serves", "dancing"], "serves:"),
        (["add", "Bad Name", "--base-url", "http://h/v1", "--serves", "chat"], "name:"),
        (["remove", "nobody"], "no provider named 'nobody'"),
        (["test", "nobody"], "no provider named 'nobody'"),
        (
            [
                "add",
                "x",
                "--base-url",
                "http://h/v1",
                "--serves",
                "chat",
                "--key-env",
                "NO_SUCH_VAR_X",
            ],
            "NO_SUCH_VAR_X is not set",
        ),
    ],
)
async def test_bad_input_is_one_line_and_status_2(url: str, argv, said) -> None:
    status, _out, err = await run(url, *argv, key=KEY)
    assert status == 2 and said in err and "Traceback" not in err and KEY not in err


@pytest.mark.parametrize("stop", [EOFError, KeyboardInterrupt])
async def test_ctrl_d_or_ctrl_c_at_the_key_prompt_adds_nothing_in_one_line(
    url: str, stop: type[BaseException]
) -> None:
    """A traceback until 2026-12-06 (found by review)."""
    parser = argparse.ArgumentParser()
    add_providers_parser(parser.add_subparsers(dest="command"))
    out, err = io.StringIO(), io.StringIO()

    def interrupted(prompt: str) -> str:
        raise stop

    argv = ["providers", "add", "x", "--base-url", "http://127.0.0.1:9/v1", "--serves", "chat"]
    status = await run_providers_command(
        parser.parse_args(argv), url, out=out, err=err, read_key=interrupted
    )
    assert (status, err.getvalue().strip()) == (130, "cancelled; nothing was added")
    assert (await run(url, "list"))[1].strip() == "No providers."
