"""The Agent Inbox page: pending approvals and questions, sessions and jobs, in a browser.

Server-rendered with Jinja2; every action is a plain HTML form (POST, then 303 back), so
the page works without JavaScript. A small script (``inbox.js``) only makes it nicer: it
sends the forms in the background and refreshes the live parts every few seconds.

Access: with ``CHATHUB_API_TOKEN`` set, ``/login`` takes the token and sets an HttpOnly,
SameSite=Strict cookie holding an HMAC of it (never the token itself); a bearer header
works too. Without a token the app only listens on loopback (``create_app``). Every POST
carries a CSRF field derived from a secret the page never shows elsewhere, and a request
whose ``Origin`` is not this host is refused, so another site cannot act through a
logged-in browser.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from bot.http.models import ids_in_range
from bot.http.operations import OperationError, Operations
from bot.telegram.store import DeliverySummary
from engine.approval.broker import SHORT_BYPASS_SECONDS, BypassRequest
from engine.approval.preview import CallDisplay, display_call, preview_call
from engine.store.inbox import InboxItem
from engine.store.schema import utcnow
from engine.store.views import MAX_PAGE

__all__ = ["WEB_DECIDER", "WebInbox"]

#: Who a decision taken on the page is shown as on the chat's card.
WEB_DECIDER = "the web inbox"
COOKIE = "chathub_web"
MAX_FORM_BYTES = 64 * 1024
MAX_TEXT_CHARS = 4000
SESSIONS_PER_PAGE = 20
_TEMPLATES = Path(__file__).with_name("templates")
#: Postponed Telegram deliveries listed on the page (the count covers all of them).
DELIVERIES_SHOWN = 10

#: What reads the Telegram outbox's state (``TelegramStore.delivery_summary``).
Deliveries = Callable[[int], Awaitable[DeliverySummary]]

#: Flash messages by code: the redirect carries only a code and an id, never text.
_FLASH = {
    "approve": "Approved call #{id}.",
    "bypass_15m": "Approved call #{id}; no more asking for 15 minutes.",
    "bypass_session": "Approved call #{id}; no more asking this session.",
    "reject": "Rejected call #{id}.",
    "answer": "Answered question #{id}.",
    "toggle": "Job #{id} updated.",
    "delete": "Job #{id} deleted.",
    "not_found": "#{id} no longer exists.",
    "resolved": "#{id} was already decided elsewhere.",
    "conflict": "#{id}: that cannot be done now.",
    "invalid": "#{id}: the request was not valid.",
    "unavailable": "The scheduler is not running.",
    "empty": "#{id}: an answer cannot be empty.",
}


class WebInbox:
    """Routes of the page over ``Operations``; ``token`` None only on loopback."""

    def __init__(
        self,
        operations: Operations,
        *,
        token: str | None,
        clock: Callable[[], datetime] = utcnow,
        deliveries: Deliveries | None = None,
    ) -> None:
        self.ops = operations
        self._deliveries = deliveries
        self.token = token or None
        self._token = token.encode() if token else None
        key = self._token or secrets.token_bytes(32)
        self._cookie_value = _mac(key, "web-session")
        self._csrf = _mac(key, "csrf")
        self._clock = clock
        self._templates = Environment(
            loader=FileSystemLoader(_TEMPLATES),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )

    def routes(self) -> list[Route]:
        return [
            Route("/", self._page(self.inbox), methods=["GET"], name="web_inbox"),
            Route("/sessions/{session_id:id}", self._page(self.session), methods=["GET"]),
            Route("/approvals/{tool_call_id:id}", self._action(self.decide), methods=["POST"]),
            Route("/questions/{request_id:id}", self._action(self.answer), methods=["POST"]),
            Route("/jobs/{job_id:id}/toggle", self._action(self.toggle_job), methods=["POST"]),
            Route("/jobs/{job_id:id}/delete", self._action(self.delete_job), methods=["POST"]),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self._action(self.logout), methods=["POST"]),
            Route("/static/inbox.js", self.script, methods=["GET"]),
        ]

    # -- access --------------------------------------------------------------------------------

    def _signed_in(self, request: Request) -> bool:
        if self._token is None:
            return True
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self._cookie_value.encode()):
            return True
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode(), self._token
        )

    def _page(self, handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def page(request: Request) -> Response:
            if not self._signed_in(request):
                return RedirectResponse("/login", status_code=303)
            if not ids_in_range(request):
                return self._render("missing.html", status=404, what="That id")
            return await handler(request)

        return page

    def _action(self, handler: Callable[[Request, dict[str, str]], Any]) -> Callable[..., Any]:
        async def action(request: Request) -> Response:
            if not _same_origin(request):
                return _plain(403, "cross-site request refused")
            if not self._signed_in(request):
                return _plain(401, "sign in first")
            if not ids_in_range(request):
                return _plain(404, "no such id")
            form = await _form(request)
            if form is None:
                return _plain(413, f"form over {MAX_FORM_BYTES} bytes")
            if _REPEATED in form:
                return _plain(400, "a form field is given more than once")
            if not hmac.compare_digest(form.get("csrf", "").encode(), self._csrf.encode()):
                return _plain(403, "missing or wrong form token; reload the page")
            return await handler(request, form)

        return action

    async def login_form(self, request: Request) -> Response:
        if self._signed_in(request):
            return RedirectResponse("/", status_code=303)
        return self._render("login.html", status=200, failed=False)

    async def login(self, request: Request) -> Response:
        if not _same_origin(request):
            return _plain(403, "cross-site request refused")
        form = await _form(request)
        if form is None:
            return _plain(413, f"form over {MAX_FORM_BYTES} bytes")
        if _REPEATED in form:
            return _plain(400, "a form field is given more than once")
        given = form.get("token", "").strip().encode()
        if self._token is None or not hmac.compare_digest(given, self._token):
            return self._render("login.html", status=401, failed=self._token is not None)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE,
            self._cookie_value,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=30 * 24 * 3600,
        )
        return response

    async def logout(self, request: Request, form: dict[str, str]) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    # -- pages ---------------------------------------------------------------------------------

    async def inbox(self, request: Request) -> Response:
        now = self._clock()
        page = min(_positive_int(request.query_params.get("page"), 1), MAX_PAGE)
        sessions = await self.ops.engine.store.views.list_sessions(
            page=page, per_page=SESSIONS_PER_PAGE
        )
        try:
            jobs = await self.ops.jobs()
        except OperationError:
            jobs = None
        deliveries = None
        if self._deliveries is not None:
            summary = await self._deliveries(DELIVERIES_SHOWN)
            deliveries = {
                "summary": summary,
                "rows": [
                    {
                        "row": row,
                        "age": _age(now, row.created_at),
                        "next": _until(now, row.next_attempt_at),
                    }
                    for row in summary.rows
                ],
            }
        return self._render(
            "inbox.html",
            approvals=[self._approval(item, now) for item in await self.ops.approvals()],
            questions=[self._question(item, now) for item in await self.ops.questions()],
            sessions=sessions,
            pages=max(1, -(-sessions["total"] // SESSIONS_PER_PAGE)),
            jobs=jobs,
            deliveries=deliveries,
            flash=_flash(request),
            flash_error=request.query_params.get("ok") == "0",
        )

    async def session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        detail = await self.ops.engine.store.views.session_detail(session_id)
        if detail is None:
            return self._render("missing.html", status=404, what=f"Session {session_id}")
        return self._render("session.html", detail=detail, as_json=_pretty)

    async def script(self, request: Request) -> Response:
        return Response(
            (_TEMPLATES / "inbox.js").read_bytes(),
            media_type="text/javascript",
            headers={"cache-control": "no-cache"},
        )

    def _render(self, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        html = self._templates.get_template(template).render(
            csrf=self._csrf, signed=self._token is not None, **context
        )
        return HTMLResponse(
            html,
            status_code=status,
            headers={
                "content-security-policy": "default-src 'self'; style-src 'self' 'unsafe-inline'",
                "x-frame-options": "DENY",
                "referrer-policy": "same-origin",
            },
        )

    def _approval(self, item: InboxItem, now: datetime) -> dict[str, Any]:
        args = _arguments(item.arguments)
        preview = (
            preview_call(self.ops.engine.workspace, item.name, args)
            if isinstance(args, dict)
            else None
        )
        shown: CallDisplay = (
            display_call(item.name, args, preview)
            if isinstance(args, dict)
            else CallDisplay("Arguments", str(args), "json")
        )
        return {"item": item, "shown": shown, "age": _age(now, item.requested_at)}

    def _question(self, item: InboxItem, now: datetime) -> dict[str, Any]:
        args = _arguments(item.arguments)
        question = args.get("question") if isinstance(args, dict) else None
        return {
            "item": item,
            "question": question or "(no question text)",
            "age": _age(now, item.requested_at),
        }

    # -- actions -------------------------------------------------------------------------------

    async def decide(self, request: Request, form: dict[str, str]) -> Response:
        tool_call_id = request.path_params["tool_call_id"]
        action = form.get("action", "")
        note = form.get("note", "")[:MAX_TEXT_CHARS]
        bypass = {
            "approve": None,
            "bypass_15m": BypassRequest("all", None, SHORT_BYPASS_SECONDS),
            "bypass_session": BypassRequest("all", None, None),
        }
        try:
            if action in bypass:
                await self.ops.approve(tool_call_id, bypass[action], by=WEB_DECIDER)
            elif action == "reject":
                await self.ops.reject(tool_call_id, note, by=WEB_DECIDER)
            else:
                return _back("invalid", tool_call_id, ok=False)
        except OperationError as exc:
            return _back(exc.code if exc.code in _FLASH else exc.kind, tool_call_id, ok=False)
        return _back(action, tool_call_id)

    async def answer(self, request: Request, form: dict[str, str]) -> Response:
        request_id = request.path_params["request_id"]
        text = form.get("answer", "").strip()
        if not text:
            return _back("empty", request_id, ok=False)
        try:
            await self.ops.answer(request_id, text[:MAX_TEXT_CHARS])
        except OperationError as exc:
            return _back(exc.code if exc.code in _FLASH else exc.kind, request_id, ok=False)
        return _back("answer", request_id)

    async def toggle_job(self, request: Request, form: dict[str, str]) -> Response:
        return await self._on_job(request, "toggle", self.ops.toggle_job)

    async def delete_job(self, request: Request, form: dict[str, str]) -> Response:
        return await self._on_job(request, "delete", self.ops.delete_job)

    async def _on_job(
        self, request: Request, done: str, act: Callable[[int], Awaitable[Any]]
    ) -> Response:
        job_id = request.path_params["job_id"]
        try:
            await act(job_id)
        except OperationError as exc:
            return _back(exc.kind, job_id, ok=False)
        return _back(done, job_id)


# -- helpers -----------------------------------------------------------------------------------


def _mac(key: bytes, purpose: str) -> str:
    return hmac.new(key, f"chathub {purpose} v1".encode(), hashlib.sha256).hexdigest()


def _same_origin(request: Request) -> bool:
    """Browsers name the page that sent a POST (``Origin``); it must be this host."""
    origin = request.headers.get("origin")
    if origin is None:  # not sent by a browser's cross-site form or script
        return True
    return urlparse(origin).netloc == request.headers.get("host", "")


async def _form(request: Request) -> dict[str, str] | None:
    """The url-encoded or multipart form as text fields; None when it is too large."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        return None
    size = 0
    chunks: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return None
        chunks.append(chunk)
    body = b"".join(chunks).decode("utf-8", errors="replace")
    form: dict[str, str] = {}
    for key, value in parse_qsl(body, keep_blank_values=True):
        if key in form:  # a field given twice is refused, not decided by the last one
            return {_REPEATED: key}
        form[key] = value
    return form


#: Marks a form that named a field twice (``_form``); the key cannot come from a browser form.
_REPEATED = "\x00repeated"


def _back(code: str, item_id: int, *, ok: bool = True) -> Response:
    query = urlencode({"done": code, "id": item_id, "ok": "1" if ok else "0"})
    return RedirectResponse(f"/?{query}", status_code=303)


def _flash(request: Request) -> str | None:
    code = request.query_params.get("done")
    template = _FLASH.get(code or "")
    if template is None:
        return None
    return template.format(id=_positive_int(request.query_params.get("id"), 0))


def _plain(status: int, message: str) -> Response:
    return Response(message + "\n", status_code=status, media_type="text/plain")


def _positive_int(value: str | None, default: int) -> int:
    try:
        number = int(value or "")
    except ValueError:
        return default
    return number if number > 0 else default


def _arguments(raw: str | None) -> Any:
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _until(now: datetime, then: datetime | None) -> str:
    if then is None:
        return "now"
    seconds = int((then - now).total_seconds())
    if seconds <= 0:
        return "now"
    return f"in {seconds} s" if seconds < 120 else f"in {seconds // 60} min"


def _age(now: datetime, then: datetime) -> str:
    seconds = max(int((now - then).total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"
