"""``.env`` written the careful way: other lines kept, the old file backed up, mode 0600,
and the new content put in place by one rename, so an interrupted write leaves the old
file exactly as it was."""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import tempfile
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from dotenv import dotenv_values

__all__ = ["EnvFile", "EnvFileError"]

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")
_BARE = re.compile(r"[A-Za-z0-9_./:@+,=-]*")


class EnvFileError(Exception):
    """The file cannot be written; ``str()`` is one plain sentence with the fix."""


class EnvFile:
    def __init__(self, path: Path, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.path = Path(path)
        self._clock = clock

    def problem(self) -> str | None:
        """Why the file cannot be written, checked before any question is asked.

        The owner's write bit is honoured even for root (who could write anyway): a
        ``.env`` someone made read-only is not ours to replace.
        """
        path = self.path
        if path.exists() and not path.is_file():
            return f"{path} is not a regular file; move it away and run chathub setup again"
        if path.exists() and not path.stat().st_mode & stat.S_IWUSR:
            return (
                f"{path} is read-only; make it writable (chmod u+w {path}) "
                "and run chathub setup again"
            )
        if not path.parent.is_dir():
            return f"the directory {path.parent} does not exist"
        if not os.access(path.parent, os.W_OK):
            return f"the directory {path.parent} is not writable, so {path.name} cannot be replaced"
        try:  # its lines are kept, so they must be readable
            self._lines()
        except EnvFileError as exc:
            return str(exc)
        return None

    def values(self) -> dict[str, str]:
        """The file's assignments as ``chathub serve`` reads them: by python-dotenv, as
        pydantic-settings does (until 2026-12-06 a quoted value with a comment after it,
        ``URL="https://…"  # proxy``, kept its quotes here; found by review)."""
        text = "\n".join(self._lines())
        return {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if v is not None}

    def write(self, updates: Mapping[str, str]) -> Path | None:
        """Set ``updates``, keep every other line; return the backup's path (if any)."""
        problem = self.problem()
        if problem:
            raise EnvFileError(problem)
        for name, value in updates.items():
            if "${" in value:  # dotenv expands it in any quotes: the service would read
                # another value (found by review)
                raise EnvFileError(
                    f"{name}: its value holds '${{', which .env expands to something else; "
                    f"set {name} in the environment instead"
                )
        text = _merge(self._lines(), updates, self._clock())
        try:
            return self._replace(text)
        except OSError as exc:
            raise EnvFileError(
                f"cannot write {self.path}: {exc.strerror or 'the write failed'}"
            ) from None

    def _lines(self) -> list[str]:
        try:
            return self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        except UnicodeDecodeError:
            raise EnvFileError(f"{self.path} is not UTF-8 text; fix or move it first") from None
        except OSError as exc:
            raise EnvFileError(
                f"cannot read {self.path}: {exc.strerror or 'read failed'}"
            ) from None

    def _replace(self, text: str) -> Path | None:
        fd, temp = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        try:
            os.fchmod(fd, 0o600)  # secrets: never readable by others, not even for a moment
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            backup = self._backup() if self.path.exists() else None
            os.replace(temp, self.path)
        except BaseException:  # Ctrl-C included: the temporary file goes, the old one stays
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        return backup

    def _backup(self) -> Path:
        stamp = self._clock().strftime("%Y%m%dT%H%M%SZ")
        backup = self.path.with_name(f"{self.path.name}.bak-{stamp}")
        counter = 1
        while backup.exists():
            counter += 1
            backup = self.path.with_name(f"{self.path.name}.bak-{stamp}-{counter}")
        data = self.path.read_bytes()
        fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return backup


def _merge(lines: list[str], updates: Mapping[str, str], now: datetime) -> str:
    """Each updated name's first line rewritten in place, its repeats dropped (a later
    repeat would override it), new names appended under one comment."""
    out: list[str] = []
    done: set[str] = set()
    for line in lines:
        match = _ASSIGNMENT.match(line)
        name = match.group(1) if match else None
        if name is None or name not in updates:
            out.append(line)
        elif name not in done:
            out.append(f"{name}={_quote(updates[name])}")
            done.add(name)
    missing = [name for name in updates if name not in done]
    if missing:
        if out and out[-1].strip():
            out.append("")
        out.append(f"# written by chathub setup, {now:%Y-%m-%d %H:%M} UTC")
        out.extend(f"{name}={_quote(updates[name])}" for name in missing)
    return "\n".join(out) + "\n"


def _quote(value: str) -> str:
    value = value.replace("\r", "").replace("\n", "")
    if _BARE.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
