"""The wizard's questions: plain ``input()`` (and ``getpass`` for secrets) on a terminal.

A prompt library would add a dependency for what four kinds of question need; Ctrl-C
and Ctrl-D at any question become ``Cancelled``, which the wizard turns into "nothing
was written".
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

__all__ = ["Cancelled", "Terminal"]


class Cancelled(Exception):
    """The person pressed Ctrl-C or Ctrl-D."""


@dataclass
class Terminal:
    read: Callable[[str], str] = input
    read_secret: Callable[[str], str] = getpass.getpass
    out: TextIO = field(default_factory=lambda: sys.stdout)

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def ask(self, prompt: str, default: str = "") -> str:
        shown = f"{prompt} [{default}]: " if default else f"{prompt}: "
        return self._read(self.read, shown).strip() or default

    def secret(self, prompt: str) -> str:
        """Typed without echo (API keys, bot tokens)."""
        return self._read(self.read_secret, f"{prompt}: ").strip()

    def yes(self, prompt: str, *, default: bool) -> bool:
        hint = "Y/n" if default else "y/N"
        while True:
            answer = self._read(self.read, f"{prompt} [{hint}] ").strip().lower()
            if not answer:
                return default
            if answer in ("y", "yes"):
                return True
            if answer in ("n", "no"):
                return False
            self.say("Please answer y or n.")

    def choose(self, prompt: str, options: Sequence[str], *, other: str | None = None) -> int:
        """A numbered choice; returns the option's index, or -1 for ``other`` (number 0)."""
        for number, option in enumerate(options, 1):
            self.say(f"  {number}) {option}")
        if other is not None:
            self.say(f"  0) {other}")
        while True:
            answer = self.ask(prompt, "1")
            if answer.isdigit() and 1 <= int(answer) <= len(options):
                return int(answer) - 1
            if answer == "0" and other is not None:
                return -1
            self.say(f"Please type a number from {0 if other else 1} to {len(options)}.")

    @staticmethod
    def _read(read: Callable[[str], str], prompt: str) -> str:
        try:
            return read(prompt)
        except (EOFError, KeyboardInterrupt):
            raise Cancelled from None
