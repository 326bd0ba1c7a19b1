"""What a page of the web inbox is given by the inbox that hosts it: who asks
(``Visitor``), and the host's guards and renderer (``PageHost``). A page module (the
memory pages) needs only this, not the inbox itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import HTMLResponse

from bot.http.signins import SignIn

__all__ = ["PageHost", "Visitor"]


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who a request comes from: a browser's sign-in, or a bearer header / loopback (None)."""

    csrf: str
    signin: SignIn | None = None


class PageHost(Protocol):
    """The inbox, as a page it hosts sees it (``WebInbox``)."""

    def guarded_page(self, handler: Callable[[Request, Visitor], Any]) -> Callable[[Request], Any]:
        """``handler`` as a page: signed in, ids in range."""
        ...

    def guarded_action(
        self, handler: Callable[[Request, dict[str, str], Visitor], Any]
    ) -> Callable[..., Any]:
        """``handler`` as a form's POST: same origin, signed in, the form's CSRF field."""
        ...

    def render(
        self, template: str, visitor: Visitor | None, *, status: int = 200, **context: Any
    ) -> HTMLResponse: ...
