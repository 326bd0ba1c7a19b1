"""The Agent Inbox page: pending approvals and questions, sessions and jobs, in a browser.

Server-rendered with Jinja2; every action is a plain HTML form (POST, then 303 back), so
the page works without JavaScript. A small script (``inbox.js``) only makes it nicer: it
sends the forms in the background and refreshes the live parts every few seconds.

Access: with ``CHATHUB_API_TOKEN`` set, ``/login`` takes the token and starts a sign-in
(``signins.py``): the HttpOnly, SameSite=Strict cookie holds a random id whose hash is
stored, so ``/logout``, the sign-ins page, expiry or a new token end it for good. Failed
sign-ins are counted per client address (``LoginThrottle``). A bearer header works too.
Without a token the app only listens on loopback (``create_app``) and nobody signs in.
Every POST carries a CSRF field of its sign-in (of the token for a bearer request, of a
per-process secret on loopback), and a request whose ``Origin`` is not this host is
refused, so another site cannot act through a signed-in browser.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlparse

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from bot.delivery import DeliverySummary
from bot.http.credentials import bearer_token, from_this_machine, peer_of, token_matches
from bot.http.health_details import HealthDetails
from bot.http.memory_pages import MemoryAdmin, MemoryPages
from bot.http.models import ids_in_range, without_nul
from bot.http.operations import OperationError, Operations
from bot.http.pages import Visitor
from bot.http.provider_pages import ProviderPages
from bot.http.signins import LoginThrottle, SignIns, csrf_token, is_handle
from engine.approval import CallDisplay, display_call
from engine.hub import CHOICES
from engine.store import MAX_PAGE, InboxItem, utcnow
from engine.text import clean_text
from memory.service import MemoryService
from providers import ProviderRegistry

if TYPE_CHECKING:
    from jinja2 import Environment

log = logging.getLogger(__name__)

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

#: What reads the outbox's state (``bot.delivery.delivery_summary``).
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
    "revoke": "Job #{id} now asks before every action.",
    "timeout": "Job #{id} deleted; its run was asked to stop and had not stopped yet.",
    "not_found": "#{id} no longer exists.",
    "resolved": "#{id} was already decided elsewhere.",
    "conflict": "#{id}: that cannot be done now.",
    "invalid": "#{id}: the request was not valid.",
    "unavailable": "The scheduler is not running.",
    "empty": "#{id}: an answer cannot be empty.",
}
#: Flash messages of the sign-ins page (``n`` is a count).
_SIGNIN_FLASH = {
    "ended": "Ended that sign-in.",
    "gone": "That sign-in had already ended.",
    "others": "Ended {n} other sign-in(s).",
}


class WebInbox:
    """Routes of the page over ``Operations``; ``token`` None only on loopback.

    ``signins`` defaults to sign-ins in the engine's database with the default policy;
    ``throttle`` to a fresh ``LoginThrottle`` on ``clock``.
    """

    def __init__(
        self,
        operations: Operations,
        *,
        token: str | None,
        signins: SignIns | None = None,
        throttle: LoginThrottle | None = None,
        clock: Callable[[], datetime] = utcnow,
        deliveries: Deliveries | None = None,
        health: HealthDetails | None = None,
        memory: MemoryService | None = None,
        providers: ProviderRegistry | None = None,
    ) -> None:
        """``memory``: long-term memory for the Memory page (``None``: it says memory is
        switched off); ``providers``: the registry for the Providers page."""
        self.ops = operations
        self._deliveries = deliveries
        self._health = health  # the doctor's checks, for /health
        self.token = token or None
        self._token = token.encode() if token else None
        self._signins: SignIns | None = None
        if token:
            self._signins = signins or SignIns(operations.engine.store.db, token=token, clock=clock)
        self._throttle = throttle or LoginThrottle(clock=clock)
        # A bearer request (or loopback, keyed by a per-process secret) has no sign-in: its
        # form token is derived from the token, which a bearer holder knows anyway.
        self._fixed_csrf = _mac(self._token or secrets.token_bytes(32), "csrf")
        self._clock = clock
        self._environment: Environment | None = None
        admin = None if memory is None else MemoryAdmin(memory, operations.engine.store.db)
        self._memory_pages = MemoryPages(self, admin)
        self._provider_pages = ProviderPages(self, providers)

    def routes(self) -> list[Route]:
        return [
            Route("/", self._page(self.inbox), methods=["GET"], name="web_inbox"),
            Route("/sessions/{session_id:id}", self._page(self.session), methods=["GET"]),
            Route("/approvals/{tool_call_id:id}", self._action(self.decide), methods=["POST"]),
            Route("/questions/{request_id:id}", self._action(self.answer), methods=["POST"]),
            Route("/jobs/{job_id:id}/toggle", self._action(self.toggle_job), methods=["POST"]),
            Route("/jobs/{job_id:id}/delete", self._action(self.delete_job), methods=["POST"]),
            Route("/jobs/{job_id:id}/revoke", self._action(self.revoke_job), methods=["POST"]),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self._action(self.logout), methods=["POST"]),
            Route("/signins", self._page(self.signins_page), methods=["GET"]),
            Route("/health", self._page(self.health_page), methods=["GET"]),
            Route("/signins/end", self._action(self.end_signin), methods=["POST"]),
            Route("/signins/end-others", self._action(self.end_others), methods=["POST"]),
            Route("/static/inbox.js", self.script, methods=["GET"]),
            *self._memory_pages.routes(),
            *self._provider_pages.routes(),
        ]

    # -- for the pages of other modules (``memory_pages.py``) ----------------------------------

    def guarded_page(self, handler: Callable[[Request, Visitor], Any]) -> Callable[[Request], Any]:
        """``handler`` as a page: signed in, ids in range."""
        return self._page(handler)

    def guarded_action(
        self, handler: Callable[[Request, dict[str, str], Visitor], Any]
    ) -> Callable[..., Any]:
        """``handler`` as a form's POST: same origin, signed in, the form's CSRF field."""
        return self._action(handler)

    def render(
        self, template: str, visitor: Visitor | None, *, status: int = 200, **context: Any
    ) -> HTMLResponse:
        return self._render(template, visitor, status=status, **context)

    # -- access --------------------------------------------------------------------------------

    async def _visitor(self, request: Request) -> Visitor | None:
        """The request's sign-in, bearer header or loopback; None when it must sign in."""
        if self._token is None or self._signins is None:
            # Loopback without a token: only from this machine (not a page of another site
            # nor a DNS rebinding's, which would read the form token here).
            return (
                Visitor(self._fixed_csrf)
                if from_this_machine(request.headers, peer=peer_of(request))
                else None
            )
        given = bearer_token(request.headers)
        address = _address(request)
        # A bearer header is a sign-in attempt too: counted, and not even checked once its
        # address has failed too often (a cookie's sign-in still counts then).
        if given is not None and self._throttle.retry_after(address) is None:
            if token_matches(given, self._token):
                return Visitor(self._fixed_csrf)
            self._throttle.failed(address)
        secret = request.cookies.get(COOKIE, "")
        signin = await self._signins.lookup(secret) if secret else None
        if signin is None:
            return None
        return Visitor(csrf_token(secret), signin)

    def _page(self, handler: Callable[[Request, Visitor], Any]) -> Callable[[Request], Any]:
        async def page(request: Request) -> Response:
            visitor = await self._visitor(request)
            if visitor is None:
                return self._signed_out(request, "/login")
            if not ids_in_range(request):
                return self._render("missing.html", visitor, status=404, what="That id")
            return await handler(request, visitor)

        return page

    def _action(
        self, handler: Callable[[Request, dict[str, str], Visitor], Any]
    ) -> Callable[..., Any]:
        async def action(request: Request) -> Response:
            if not _same_origin(request):
                return _plain(403, "cross-site request refused")
            visitor = await self._visitor(request)
            if visitor is None:
                return _plain(401, "sign in first")
            if not ids_in_range(request):
                return _plain(404, "no such id")
            form = await _form(request)
            if form is None:
                return _plain(413, f"form over {MAX_FORM_BYTES} bytes")
            if _REPEATED in form:
                return _plain(400, "a form field is given more than once")
            if not hmac.compare_digest(form.get("csrf", "").encode(), visitor.csrf.encode()):
                return _plain(403, "missing or wrong form token; reload the page")
            return await handler(request, form, visitor)

        return action

    def _signed_out(self, request: Request, location: str) -> Response:
        """A redirect that also drops a cookie naming no live sign-in."""
        response = RedirectResponse(location, status_code=303)
        if COOKIE in request.cookies:
            response.delete_cookie(
                COOKIE, httponly=True, samesite="strict", secure=request.url.scheme == "https"
            )
        return response

    async def login_form(self, request: Request) -> Response:
        after = after_sign_in(request.query_params.get("next"))
        if self._token is not None and await self._visitor(request) is not None:
            return RedirectResponse(after, status_code=303)
        return self._render("login.html", None, status=200, failed=False, next=after)

    async def login(self, request: Request) -> Response:
        if not _same_origin(request):
            return _plain(403, "cross-site request refused")
        address = _address(request)
        wait = self._throttle.retry_after(address)
        if wait is not None:  # refused before the token is even looked at
            return Response(
                f"Too many failed sign-ins from this address; try again in {_wait_words(wait)}.\n",
                status_code=429,
                media_type="text/plain",
                headers={"retry-after": str(wait)},
            )
        form = await _form(request)
        if form is None:
            return _plain(413, f"form over {MAX_FORM_BYTES} bytes")
        if _REPEATED in form:
            return _plain(400, "a form field is given more than once")
        given = form.get("token", "").strip().encode()
        after = after_sign_in(form.get("next"))
        if self._token is None or self._signins is None:
            return self._render("login.html", None, status=401, failed=False, next=after)
        if not hmac.compare_digest(given, self._token):
            self._throttle.failed(address)
            return self._render("login.html", None, status=401, failed=True, next=after)
        self._throttle.succeeded(address)
        previous = await self._visitor(request)
        if previous is not None and previous.signin is not None:
            await self._signins.revoke(previous.signin.handle)  # one browser, one sign-in
        new = await self._signins.create(address, request.headers.get("user-agent"))
        response = RedirectResponse(after, status_code=303)
        response.set_cookie(
            COOKIE,
            new.secret,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=int(self._signins.policy.absolute.total_seconds()),
        )
        return response

    async def logout(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        if self._signins is not None and visitor.signin is not None:
            await self._signins.revoke(visitor.signin.handle)
        return self._signed_out(request, "/login")

    async def health_page(self, request: Request, visitor: Visitor) -> Response:
        """``chathub doctor``'s checks, one line each with the fix (``?fresh=1`` runs anew)."""
        report = None
        if self._health is not None:
            fresh = request.query_params.get("fresh") == "1"
            try:
                report = await self._health.report(fresh=fresh)
            except Exception:  # a check that crashed is a bug: logged, one sentence shown
                log.exception("health page: the checks failed unexpectedly")
        return self._render("health.html", visitor, report=report, enabled=self._health is not None)

    async def signins_page(self, request: Request, visitor: Visitor) -> Response:
        signins = await self._signins.active() if self._signins is not None else None
        now = self._clock()
        rows = [
            {
                "signin": signin,
                "this": visitor.signin is not None and signin.handle == visitor.signin.handle,
                "created": _age(now, signin.created_at),
                "seen": _age(now, signin.last_seen_at),
            }
            for signin in signins or []
        ]
        return self._render(
            "signins.html",
            visitor,
            rows=rows,
            enabled=signins is not None,
            flash=_signin_flash(request),
        )

    async def end_signin(
        self, request: Request, form: dict[str, str], visitor: Visitor
    ) -> Response:
        handle = form.get("signin", "")
        if self._signins is None or not is_handle(handle):
            return _plain(400, "that is not a sign-in")
        ended = await self._signins.revoke(handle)
        if visitor.signin is not None and handle == visitor.signin.handle:
            return self._signed_out(request, "/login")
        return RedirectResponse(f"/signins?done={'ended' if ended else 'gone'}", status_code=303)

    async def end_others(
        self, request: Request, form: dict[str, str], visitor: Visitor
    ) -> Response:
        if self._signins is None:
            return _plain(400, "nobody signs in without CHATHUB_API_TOKEN")
        keep = visitor.signin.handle if visitor.signin is not None else None
        ended = await self._signins.revoke_others(keep)
        query = urlencode({"done": "others", "n": ended})
        return RedirectResponse(f"/signins?{query}", status_code=303)

    # -- pages ---------------------------------------------------------------------------------

    async def inbox(self, request: Request, visitor: Visitor) -> Response:
        now = self._clock()
        if len(request.query_params.getlist("page")) > 1:  # neither is taken
            return _plain(400, "page: given more than once.")
        # Anything else is a page: not a number, page 1; past the end (however long), the
        # last (a value over 1,000 characters was a 400 until 2026-12-06; found by review).
        given = request.query_params.get("page")
        page = min(_positive_int(given[:20] if given else None, 1), MAX_PAGE)
        views = self.ops.engine.store.views
        sessions = await views.list_sessions(page=page, per_page=SESSIONS_PER_PAGE)
        last = max(1, -(-sessions["total"] // SESSIONS_PER_PAGE))
        if page > last:  # past the end: the last page ("No sessions yet" while there were)
            sessions = await views.list_sessions(page=last, per_page=SESSIONS_PER_PAGE)
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
            visitor,
            approvals=[await self._approval(item, now) for item in await self.ops.approvals()],
            questions=[self._question(item, now) for item in await self.ops.questions()],
            sessions=sessions,
            pages=last,
            jobs=jobs,
            deliveries=deliveries,
            flash=_flash(request),
            flash_error=request.query_params.get("ok") == "0",
        )

    async def session(self, request: Request, visitor: Visitor) -> Response:
        session_id = request.path_params["session_id"]
        detail = await self.ops.engine.store.views.session_detail(session_id)
        if detail is None:
            return self._render("missing.html", visitor, status=404, what=f"Session {session_id}")
        return self._render("session.html", visitor, detail=detail, as_json=_pretty)

    async def script(self, request: Request) -> Response:
        return Response(
            (_TEMPLATES / "inbox.js").read_bytes(),
            media_type="text/javascript",
            headers={"cache-control": "no-cache"},
        )

    def _templates(self) -> Environment:
        """Jinja2 is loaded with the first page, not with the service (most never serve one)."""
        if self._environment is None:
            from jinja2 import Environment, FileSystemLoader, select_autoescape

            self._environment = Environment(
                loader=FileSystemLoader(_TEMPLATES),
                autoescape=select_autoescape(["html"]),
                trim_blocks=True,
                lstrip_blocks=True,
            )
        return self._environment

    def _render(
        self, template: str, visitor: Visitor | None, *, status: int = 200, **context: Any
    ) -> HTMLResponse:
        """``visitor`` None: a page for someone not signed in (no sign-out button)."""
        html = (
            self._templates()
            .get_template(template)
            .render(
                csrf=visitor.csrf if visitor else None, signed=self._token is not None, **context
            )
        )
        return HTMLResponse(
            # A lone surrogate (a model's token that cut an emoji, in a question or a
            # call's arguments) made the whole page a 500 until 2026-12-07 (found by review).
            clean_text(html),
            status_code=status,
            headers={
                "content-security-policy": "default-src 'self'; style-src 'self' 'unsafe-inline'",
                "x-frame-options": "DENY",
                "referrer-policy": "same-origin",
            },
        )

    async def _approval(self, item: InboxItem, now: datetime) -> dict[str, Any]:
        args = _arguments(item.arguments)
        preview = await self.ops.engine.preview_pending(item)
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

    async def decide(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        tool_call_id = request.path_params["tool_call_id"]
        action = form.get("action", "")
        note = form.get("note", "")[:MAX_TEXT_CHARS]
        choice = CHOICES.get(action)
        if choice is None:
            return _back("invalid", tool_call_id, ok=False)
        try:
            await self.ops.decide(tool_call_id, choice, note=note, by=WEB_DECIDER)
        except OperationError as exc:
            return _back(exc.code if exc.code in _FLASH else exc.kind, tool_call_id, ok=False)
        return _back(action, tool_call_id)

    async def answer(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        request_id = request.path_params["request_id"]
        text = form.get("answer", "").strip()
        if not text:
            return _back("empty", request_id, ok=False)
        try:
            await self.ops.answer(request_id, text[:MAX_TEXT_CHARS], by=WEB_DECIDER)
        except OperationError as exc:
            return _back(exc.code if exc.code in _FLASH else exc.kind, request_id, ok=False)
        return _back("answer", request_id)

    async def toggle_job(
        self, request: Request, form: dict[str, str], visitor: Visitor
    ) -> Response:
        """What the button said (``enabled``: 1 resume, 0 pause): a page shown before the
        job was paused elsewhere resumed it, the opposite (found by review on
        2026-12-06). A form without it flips, as before."""
        wanted = {"1": True, "0": False}.get(form.get("enabled", ""))
        return await self._on_job(request, "toggle", partial(self.ops.toggle_job, enabled=wanted))

    async def delete_job(
        self, request: Request, form: dict[str, str], visitor: Visitor
    ) -> Response:
        async def delete(job_id: int) -> None:
            if not (await self.ops.delete_job(job_id)).stopped:
                raise OperationError("timeout", "its run is still stopping")

        return await self._on_job(request, "delete", delete)

    async def revoke_job(
        self, request: Request, form: dict[str, str], visitor: Visitor
    ) -> Response:
        return await self._on_job(request, "revoke", self.ops.revoke_job_grants)

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


def _address(request: Request) -> str | None:
    """The client's address (behind a trusted proxy, uvicorn's proxy headers set it)."""
    return request.client.host if request.client else None


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
        form[key] = without_nul(value)  # PostgreSQL stores none: a reason with one was a 500
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


def _signin_flash(request: Request) -> str | None:
    template = _SIGNIN_FLASH.get(request.query_params.get("done") or "")
    if template is None:
        return None
    return template.format(n=_positive_int(request.query_params.get("n"), 0))


def _wait_words(seconds: int) -> str:
    minutes = -(-seconds // 60)
    return f"{seconds} seconds" if seconds < 60 else f"{minutes} minute(s)"


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
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
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


#: Where a sign-in may lead: this app's own pages only (never a link to another site).
SIGN_IN_DESTINATIONS = frozenset({"/", "/chat"})


def after_sign_in(wanted: str | None) -> str:
    """The page a sign-in leads to: ``next`` when it is one of ours, else the inbox."""
    return wanted if wanted in SIGN_IN_DESTINATIONS else "/"
