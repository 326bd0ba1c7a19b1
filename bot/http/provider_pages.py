"""The inbox's Providers page: the API provider registry (docs/voice.md), listed with
keys masked, added, tested and removed through forms with the inbox's sign-in,
same-origin and CSRF checks. A change is announced on the SystemEventBus at once, as
``POST /api/providers`` does; the key typed into the form is never shown back."""

from __future__ import annotations

from urllib.parse import urlencode

import httpx
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from bot.http.pages import PageHost, Visitor
from providers import SERVICES, Provider, ProviderError, ProviderRegistry, probe

__all__ = ["ProviderPages"]

_FLASH = {
    "added": "Provider {name} added: the next job it serves uses it.",
    "removed": "Provider {name} removed.",
    "gone": "There is no provider {name}.",
}


class ProviderPages:
    def __init__(self, inbox: PageHost, registry: ProviderRegistry | None) -> None:
        self._inbox = inbox
        self._registry = registry

    def routes(self) -> list[Route]:
        page, action = self._inbox.guarded_page, self._inbox.guarded_action
        return [
            Route("/providers", page(self.page), methods=["GET"], name="web_providers"),
            Route("/providers", action(self.add), methods=["POST"]),
            Route("/providers/{name}/remove", action(self.remove), methods=["POST"]),
            Route("/providers/{name}/test", action(self.test), methods=["POST"]),
        ]

    async def page(
        self,
        request: Request,
        visitor: Visitor,
        *,
        said: str | None = None,
        error: bool = False,
        status: int = 200,
    ) -> Response:
        if self._registry is None:
            return self._inbox.render("providers.html", visitor, enabled=False)
        params = request.query_params
        code, name = params.get("done", ""), params.get("name", "")[:64]
        flash = said or (_FLASH[code].format(name=name) if code in _FLASH else None)
        providers = await self._registry.store.all()
        if code == "added":  # one listing no models says when it is used (the CLI's note)
            note = next((p.unlisted_note() for p in providers if p.name == name), None)
            flash = f"Provider {name} added. It {note}" if note else flash
        return self._inbox.render(
            "providers.html",
            visitor,
            status=status,
            enabled=True,
            providers=[p.shown() for p in providers],
            services=SERVICES,
            flash=flash,
            flash_error=error or code == "gone",
        )

    async def add(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        if self._registry is None:
            return await self.page(request, visitor)
        serves = [s for s in SERVICES if form.get(f"serves_{s}")]
        try:
            provider = Provider.checked(
                form.get("name", ""),
                form.get("base_url", ""),
                form.get("api_key", ""),
                serves,
                form.get("models", ""),
            )
            await self._registry.add(provider)
        except ProviderError as exc:
            return await self.page(request, visitor, said=str(exc), error=True, status=422)
        return _back("added", provider.name)

    async def remove(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        name = request.path_params["name"][:64]
        if self._registry is None:
            return await self.page(request, visitor)
        removed = await self._registry.remove(name)
        return _back("removed" if removed else "gone", name)

    async def test(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        name = request.path_params["name"][:64]
        provider = await self._registry.store.get(name) if self._registry else None
        if provider is None:
            return _back("gone", name)
        async with httpx.AsyncClient() as http:
            try:
                said, ok = await probe(http, provider), True
            except ProviderError as exc:
                said, ok = str(exc), False
        return await self.page(request, visitor, said=f"{'✓' if ok else '✗'} {said}", error=not ok)


def _back(code: str, name: str) -> Response:
    return RedirectResponse(
        f"/providers?{urlencode({'done': code, 'name': name})}", status_code=303
    )
