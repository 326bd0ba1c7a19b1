"""One ``chathub serve`` per SQLite database: a second one is refused with a sentence.

SQLite serves one process (one writer, and the in-process bus carries the events); a
second service on the same file would poll Telegram and run turns beside the first.
``hold_serve_lock`` takes an exclusive, non-blocking ``flock`` on ``<database>.serve.lock``
for the life of the process: the kernel drops it when the process ends, ``kill -9``
included, so a crash never leaves a stale lock behind. ``chathub chat`` (the terminal)
runs beside a service, one at a time: ``hold_console_lock`` (``<database>.console.lock``);
a second one re-ran the first one's live turn as "interrupted" (until 2026-12-07; found by
review).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import make_url

from engine.config import ConfigError

__all__ = ["ServeLock", "SqliteInUse", "hold_console_lock", "hold_serve_lock", "lock_path_for"]


class SqliteInUse(Exception):
    """Another ``chathub serve`` holds this SQLite database; the message says so."""


class ServeLock:
    """The held lock; ``close`` (or the process's end) lets it go."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def lock_path_for(database_url: str, role: str = "serve") -> Path | None:
    """The lock file of a SQLite database file for ``role``; None for PostgreSQL or
    ``:memory:``."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    database = Path(url.database).expanduser().resolve()
    return database.with_name(f"{database.name}.{role}.lock")


def hold_serve_lock(database_url: str) -> ServeLock | None:
    """Hold the SQLite database's serve lock (None: PostgreSQL, nothing to hold).

    Raises ``SqliteInUse`` when another process holds it.
    """
    return _hold(
        database_url,
        "serve",
        lambda who, name: (
            f"{who} is running on this SQLite database ({name}); SQLite serves "
            "one process — to run several, use PostgreSQL (docs/scale-out.md)."
        ),
    )


def hold_console_lock(database_url: str) -> ServeLock | None:
    """Hold the terminal conversation of a SQLite database (None: PostgreSQL).

    Raises ``SqliteInUse`` when another ``chathub chat`` holds it.
    """
    return _hold(
        database_url,
        "console",
        lambda who, name: (
            f"{who} is open on this SQLite database ({name}); the terminal "
            "conversation is one at a time: go on in that one, or end it first."
        ),
    )


def _hold(database_url: str, role: str, refusal: Callable[[str, str], str]) -> ServeLock | None:
    path = lock_path_for(database_url, role)
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:  # a file where its folder goes: a traceback until 2026-12-07
        raise ConfigError(
            f"DATABASE_URL: cannot open the database ({exc.strerror or exc}: {path.parent})"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        command = "chathub serve" if role == "serve" else "chathub chat"
        who = f"Another {command} (pid {holder})" if holder else f"Another {command}"
        raise SqliteInUse(refusal(who, path.name.removesuffix(f".{role}.lock"))) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)  # who holds it, for the next one's sentence
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return ServeLock(path, fd)


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode().strip() or "0") or None
    return None
