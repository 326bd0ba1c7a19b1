"""``GET /chat``: the web chat page, and its script and style, shipped in the package.

No build step and nothing from another site: ``static/`` holds the page, and a strict
Content-Security-Policy lets it load only this host's script and style and talk only to
this host. Signed out (as for the inbox): a redirect to ``/login``.
"""

from __future__ import annotations

import html
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from bot.webchat.auth import SocketAuth

__all__ = ["ChatPage"]

_STATIC = Path(__file__).with_name("static")
_TYPES = {"chat.js": "text/javascript; charset=utf-8", "chat.css": "text/css; charset=utf-8"}
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = {
    "content-security-policy": POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class ChatPage:
    def __init__(self, auth: SocketAuth) -> None:
        self._auth = auth
        self._files = {name: (_STATIC / name).read_bytes() for name in _TYPES}
        self._page = (_STATIC / "chat.html").read_text()

    def routes(self) -> list[Route]:
        return [
            Route("/chat", self.page, methods=["GET"], name="web_chat"),
            Route("/chat/static/{name}", self.static, methods=["GET"]),
        ]

    async def page(self, request: Request) -> Response:
        access = await self._auth.check(request)
        if access == "foreign_origin":
            return PlainTextResponse("cross-site request refused", status_code=403)
        if isinstance(access, str):
            return RedirectResponse("/login?next=/chat", status_code=303)
        body = self._page.replace("{{csrf}}", html.escape(access.csrf or "", quote=True))
        return Response(body, media_type="text/html; charset=utf-8", headers=_HEADERS)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self._files:
            return PlainTextResponse("no such file", status_code=404)
        headers = {**_HEADERS, "cache-control": "no-cache"}
        return Response(self._files[name], media_type=_TYPES[name], headers=headers)
