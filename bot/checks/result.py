"""What a check found: one line for a person, the fix when it failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Check", "Problem"]


@dataclass(frozen=True, slots=True)
class Check:
    """One checked fact. ``name`` is stable (``model.tools``) for the JSON report;
    ``summary`` is one plain sentence; ``fix`` says what to do when ``ok`` is false."""

    name: str
    ok: bool
    summary: str
    fix: str = ""

    def line(self) -> str:
        """The doctor's line: ``✓ summary`` or ``✗ summary — fix``."""
        if self.ok:
            return f"✓ {self.summary}"
        return f"✗ {self.summary}" + (f" — {self.fix}" if self.fix else "")

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "summary": self.summary, "fix": self.fix}


class Problem(Exception):
    """A probe failed; ``str()`` is one plain sentence a person may read, ``fix`` what to do.

    ``kind`` lets a caller react (the wizard asks for the key again on ``"auth"``); the
    underlying error, if any, goes to the log, never into the sentence.
    """

    def __init__(self, sentence: str, *, kind: str = "error", fix: str = "") -> None:
        super().__init__(sentence)
        self.kind = kind
        self.fix = fix
