"""An OpenAI-compatible ``POST /v1/embeddings`` client (Ollama, vLLM, OpenAI).

Every failure is one ``EmbeddingError`` whose message is a plain sentence: the server is
away or slow, it refused, or its answer is not a list of one finite vector per input, all
of one length. Vectors come back L2-normalised, so a dot product is the cosine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["EmbeddingClient", "EmbeddingConfig", "EmbeddingError", "normalised"]

#: Longest answer read (a batch of 64 vectors of 4,096 floats is ~6 MB as JSON).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
MAX_DIMENSIONS = 8_192


class EmbeddingError(Exception):
    """The embeddings endpoint failed; ``str()`` is one sentence for the log."""


@dataclass(frozen=True, slots=True)
class EmbeddingConfig:
    model: str
    base_url: str
    api_key: str = ""
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

    @property
    def model(self) -> str:
        return self.config.model

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
        except httpx.TimeoutException as exc:
            raise EmbeddingError(
                f"the embeddings endpoint did not answer within {self.config.timeout_s:g} s"
            ) from exc
        except httpx.TransportError as exc:
            raise EmbeddingError(f"cannot reach the embeddings endpoint {self._url}") from exc
        if response.status_code != 200:
            raise EmbeddingError(
                f"the embeddings endpoint answered HTTP {response.status_code}: "
                f"{response.text[:200]!r}"
            )
        if len(response.content) > MAX_RESPONSE_BYTES:
            raise EmbeddingError("the embeddings endpoint's answer is too large")
        try:
            payload = response.json()
        except ValueError as exc:
            raise EmbeddingError("the embeddings endpoint's answer is not JSON") from exc
        return _vectors(payload, len(texts))


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
        if not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in vector
        ):
            raise EmbeddingError("the embeddings endpoint returned a vector that is not numbers")
        vectors.append(normalised([float(x) for x in vector]))
    if len({len(v) for v in vectors}) != 1:
        raise EmbeddingError("the embeddings endpoint returned vectors of different lengths")
    return vectors
