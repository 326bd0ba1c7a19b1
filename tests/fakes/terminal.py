"""Drive a command through a pseudo-terminal, as a person at a keyboard would.

The standard ``pty`` machinery (pexpect is not a dependency): the child gets the pty as
its controlling terminal, so ``isatty()`` is true, ``getpass`` reads from it and
``ctrl_c()`` reaches it as SIGINT through the line discipline, as a real Ctrl-C does::

    with PtySession([sys.executable, "-m", "bot.cli", "setup"], cwd=tmp, env=env) as term:
        term.expect("Base URL")
        term.send("http://127.0.0.1:8000/v1")
        assert term.wait() == 0
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

__all__ = ["PtySession"]


def _controlling_tty() -> None:  # runs in the child, after setsid
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtySession:
    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float = 15.0,
    ) -> None:
        master, slave = os.openpty()
        # Wide enough that no line the tests look for is wrapped.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self._master = master
        self.timeout_s = timeout_s
        self.output = ""
        """Everything read so far (echoed input included)."""
        self._seen = 0  # ``expect`` searches from here
        self.proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            preexec_fn=_controlling_tty,
            close_fds=True,
        )
        os.close(slave)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if self._master >= 0:
            os.close(self._master)
            self._master = -1

    def expect(self, pattern: str, *, timeout_s: float | None = None) -> re.Match[str]:
        """Wait until ``pattern`` (a regex) appears after the previous match."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            match = regex.search(self.output, self._seen)
            if match:
                self._seen = match.end()
                return match
            if not self._read(deadline - time.monotonic()):
                raise AssertionError(
                    f"{pattern!r} did not appear; the terminal shows:\n{self.output[-3000:]}"
                )

    def send(self, line: str) -> None:
        """Type ``line`` and press Enter."""
        os.write(self._master, line.encode() + b"\r")

    def ctrl_c(self) -> None:
        os.write(self._master, b"\x03")

    def wait(self, timeout_s: float | None = None) -> int:
        """The exit status, reading the rest of the output meanwhile."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"the command did not end; it shows:\n{self.output[-3000:]}")
            self._read(min(0.2, deadline - time.monotonic()))
        while self._read(0.05):
            pass
        return self.proc.returncode

    def _read(self, timeout_s: float) -> bool:
        if timeout_s <= 0 or self._master < 0:
            return False
        ready, _, _ = select.select([self._master], [], [], timeout_s)
        if not ready:
            return False
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        self.output += data.decode("utf-8", "replace").replace("\r\n", "\n")
        return True
