"""A second serve on one SQLite file is refused (the lock held by a real process); another
bot's token on a database is refused, a rotated token of the same bot is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.fleet.bot_identity import OtherBot, check_bot_identity
from bot.fleet.single_sqlite import SqliteInUse, hold_serve_lock
from engine.store.db import connect
from tests.pg import migrated_sqlite

HOLD = "import sys; from bot.fleet.single_sqlite import hold_serve_lock as h; l = h(sys.argv[1]); print('held', flush=True); sys.stdin.read()"


def test_a_second_serve_on_one_sqlite_file_is_refused_until_the_first_is_killed(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'chathub.db'}"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(SqliteInUse) as refused:
            hold_serve_lock(url)
        assert str(refused.value).startswith(f"Another chathub serve (pid {holder.pid}) is running")
        assert "use PostgreSQL" in str(refused.value)
    finally:
        holder.kill()
        holder.wait()
    lock = hold_serve_lock(url)  # the kernel dropped the killed process's lock
    assert lock is not None
    lock.close()
    assert hold_serve_lock("postgresql+asyncpg://u@h/db") is None


async def test_another_bots_token_is_refused_and_a_rotated_one_accepted(tmp_path: Path) -> None:
    db = connect(migrated_sqlite(tmp_path / "chathub.db"))
    try:
        assert await check_bot_identity(db, "111:first-secret") == "111"
        assert await check_bot_identity(db, "111:rotated-secret") == "111"
        with pytest.raises(OtherBot) as refused:
            await check_bot_identity(db, "222:other-secret")
        assert "111" in str(refused.value) and "222" in str(refused.value)
        assert "secret" not in str(refused.value)
        with pytest.raises(ValueError, match="not a bot token"):
            await check_bot_identity(db, "nonsense")
    finally:
        await db.close()
