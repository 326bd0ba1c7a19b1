"""An OpenAI-compatible ``POST /v1/embeddings`` client (Ollama, vLLM, OpenAI).

Every failure is one ``EmbeddingError`` whose message is a plain sentence: the server is
away or slow, it refused, or its answer is not a list of one finite vector per input, all
of one length. Vectors come back L2-normalised, so a dot product is the cosine.

Which endpoint embeds: ``EmbeddingChoice`` (``providers.ServiceChoice`` for
``embeddings``): the oldest provider serving ``embeddings`` wins over ``EMBEDDING_*``,
asked with ``EMBEDDING_MODEL`` when it lists it (or lists none), else with its first model;
followed on the SystemEventBus. ``ChosenEmbeddings`` hands out the ``EmbeddingClient`` of
the endpoint chosen now (``current``); a fixed ``EmbeddingClient`` is its own ``current``.
A caller takes one ``current()`` per batch or query and uses its ``model`` for the
vectors, so a vector is always stored and compared under the model that made it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from providers import Endpoint, ProviderRegistry, ServiceChoice

__all__ = [
    "ChosenEmbeddings",
    "EmbeddingChoice",
    "EmbeddingClient",
    "EmbeddingConfig",
    "EmbeddingError",
    "normalised",
]

#: Longest answer read (a batch of 64 vectors of 4,096 floats is ~6 MB as JSON).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
MAX_DIMENSIONS = 8_192
#: Characters of an error answer read for what it says.
MAX_ERROR_BODY_CHARS = 4_096


#: What a server answers when it is away or busy, whatever it was sent.
AWAY_STATUSES = frozenset({429, 503})


class EmbeddingError(Exception):
    """The embeddings endpoint failed; ``str()`` is one sentence for the log.
    ``retriable``: the endpoint was away (unreachable, busy: ``AWAY_STATUSES``) or refused
    the settings (a key, the account's credit, a model), so the batch is not to blame and
    is not counted as failing (a 500 or a read timeout is: the batch may cause it every
    time, and would otherwise stall every later one)."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


@dataclass(frozen=True, slots=True)
class EmbeddingConfig:
    model: str
    base_url: str
    #: Never in the repr (a log line, a traceback).
    api_key: str = field(default="", repr=False)
    timeout_s: float = 30.0
    #: Characters of a text sent (a longer one is cut): models read a few hundred tokens.
    max_input_chars: int = 2_000


def normalised(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0 or not math.isfinite(norm):
        raise EmbeddingError("the embeddings endpoint returned a zero or infinite vector")
    return [x / norm for x in vector]


class EmbeddingClient:
    def __init__(self, config: EmbeddingConfig, http: httpx.AsyncClient) -> None:
        self.config = config
        self._http = http
        self._url = config.base_url.rstrip("/") + "/embeddings"
        self._headers = {"Content-Type": "application/json"}
        if config.api_key:
            self._headers["Authorization"] = f"Bearer {config.api_key}"

    def __repr__(self) -> str:
        return f"EmbeddingClient({self.config.model!r}, {self.config.base_url!r})"

    @property
    def model(self) -> str:
        return self.config.model

    def current(self) -> EmbeddingClient:
        """The client embedding now: this one (``ChosenEmbeddings``' may change)."""
        return self

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text, in order."""
        if not texts:
            return []
        body = {
            "model": self.config.model,
            "input": [t[: self.config.max_input_chars] or " " for t in texts],
        }
        try:
            response = await self._http.post(
                self._url,
                json=body,
                headers=self._headers,
                timeout=httpx.Timeout(self.config.timeout_s),
            )
        except (httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Nothing was sent (a host that drops packets): the endpoint is away, not
            # slow on this batch (until 2026-12-07 counted; found by review).
            raise EmbeddingError(
                f"cannot reach the embeddings endpoint {self._url} "
                f"within {self.config.timeout_s:g} s",
                retriable=True,
            ) from exc
        except httpx.TimeoutException as exc:
            raise EmbeddingError(
                f"the embeddings endpoint did not answer within {self.config.timeout_s:g} s"
            ) from exc
        except httpx.TransportError as exc:
            raise EmbeddingError(
                f"cannot reach the embeddings endpoint {self._url}", retriable=True
            ) from exc
        except (httpx.InvalidURL, UnicodeEncodeError) as exc:  # a key no header carries
            raise EmbeddingError(
                "the embeddings endpoint's address or key cannot be used", retriable=True
            ) from exc
        except httpx.DecodingError as exc:  # a Content-Encoding the body has not (a proxy's)
            raise EmbeddingError(
                "the embeddings endpoint's answer could not be read", retriable=True
            ) from exc
        status = response.status_code
        if status in (401, 402, 403, 404) or (status == 400 and _says_key_refused(response)):
            # The body may quote the key: never in the message. A key (401, or Gemini's
            # 400 API_KEY_INVALID), an account out of credit (402) or a model or path
            # (404) it does not know is the settings' fault, not the batch's: waited for
            # until mended (until 2026-12-07 counted, and every batch skipped; the 402
            # and the 400 found by review). A 403 may be the batch's (moderation): counted.
            refused = {402: "the account (no credit left)", 404: "its model or path"}
            raise EmbeddingError(
                f"the embeddings endpoint refused {refused.get(status, 'its key')} (HTTP {status})",
                retriable=status != 403,
            )
        if response.status_code != 200:
            raise EmbeddingError(
                f"the embeddings endpoint answered HTTP {response.status_code}: "
                f"{response.text[:200]!r}",
                retriable=response.status_code in AWAY_STATUSES,
            )
        if len(response.content) > MAX_RESPONSE_BYTES:
            raise EmbeddingError("the embeddings endpoint's answer is too large")
        try:
            payload = response.json()
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly nested
            raise EmbeddingError("the embeddings endpoint's answer is not JSON") from exc
        return _vectors(payload, len(texts))


#: What an endpoint that answers a bad key with a 400 says (Gemini: ``API_KEY_INVALID``),
#: as ``engine/llm/client.py`` reads it.
_KEY_REFUSED = ("API_KEY_INVALID", "PERMISSION_DENIED", "UNAUTHENTICATED")


def _says_key_refused(response: httpx.Response) -> bool:
    text = response.text[:MAX_ERROR_BODY_CHARS]
    return any(reason in text for reason in _KEY_REFUSED)


class EmbeddingChoice(ServiceChoice):
    """Which endpoint embeds now: the oldest provider serving ``embeddings``, else
    ``EMBEDDING_*`` (``configured``: ``memory.settings.embedding_config``), else nobody."""

    def __init__(
        self,
        configured: EmbeddingConfig | None,
        registry: ProviderRegistry | None,
        *,
        timeout_s: float | None = None,
    ) -> None:
        """``timeout_s``: a provider's requests' (``EMBEDDING_TIMEOUT_SECONDS``; unset: the
        configured endpoint's, else 30 s)."""
        self._configured = configured
        if timeout_s is None:
            timeout_s = configured.timeout_s if configured is not None else 30.0
        self._timeout_s = timeout_s
        fallback = None
        if configured is not None:
            fallback = Endpoint(
                configured.base_url.rstrip("/"),
                configured.api_key,
                configured.model,
                "EMBEDDING_MODEL",
            )
        super().__init__(
            "embeddings",
            registry,
            model=configured.model if configured is not None else None,
            fallback=fallback,
        )

    def config(self) -> EmbeddingConfig | None:
        """The chosen endpoint as an ``EmbeddingConfig`` (``None``: nothing embeds)."""
        endpoint = self.endpoint()
        if endpoint is None:
            return None
        if endpoint.origin == "EMBEDDING_MODEL" and self._configured is not None:
            return self._configured
        return EmbeddingConfig(
            endpoint.model, endpoint.base_url, endpoint.api_key, timeout_s=self._timeout_s
        )


class ChosenEmbeddings:
    """The ``EmbeddingClient`` of the endpoint ``choice`` names now (one per endpoint, kept
    until the choice changes)."""

    def __init__(self, choice: EmbeddingChoice, http: httpx.AsyncClient) -> None:
        self.choice = choice
        self._http = http
        self._client: EmbeddingClient | None = None

    def __repr__(self) -> str:
        return f"ChosenEmbeddings({self.choice.endpoint()!r})"

    def current(self) -> EmbeddingClient | None:
        """The client embedding now; ``None`` when nothing embeds (full text only)."""
        config = self.choice.config()
        if config is None:
            return None
        if self._client is None or self._client.config != config:
            self._client = EmbeddingClient(config, self._http)
        return self._client


def _vectors(payload: Any, count: int) -> list[list[float]]:
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise EmbeddingError(f"the embeddings endpoint did not return {count} vector(s)")
    # OpenAI's answer carries an ``index`` per item; order by it where every item has one.
    if all(isinstance(item, dict) and isinstance(item.get("index"), int) for item in data):
        data = sorted(data, key=lambda item: item["index"])
        if [item["index"] for item in data] != list(range(count)):
            raise EmbeddingError("the embeddings endpoint's indexes do not match the inputs")
    vectors: list[list[float]] = []
    for item in data:
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(vector, list) or not 0 < len(vector) <= MAX_DIMENSIONS:
            raise EmbeddingError("the embeddings endpoint returned an item without a vector")
        numbers = _finite_floats(vector)
        if numbers is None:
            raise EmbeddingError("the embeddings endpoint returned a vector that is not numbers")
        vectors.append(normalised(numbers))
    if len({len(v) for v in vectors}) != 1:
        raise EmbeddingError("the embeddings endpoint returned vectors of different lengths")
    return vectors


def _finite_floats(values: list[Any]) -> list[float] | None:
    """``values`` as finite floats, or ``None``: a bool, a string, an infinity, or an
    integer too large for a float (400 digits raised ``OverflowError``) is no number."""
    numbers: list[float] = []
    for x in values:
        if not isinstance(x, int | float) or isinstance(x, bool):
            return None
        try:
            number = float(x)
        except OverflowError:
            return None
        if not math.isfinite(number):
            return None
        numbers.append(number)
    return numbers
