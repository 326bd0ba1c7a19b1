"""How real OpenAI-compatible servers frame tool calls, for the fake model server.

Each dialect writes the same calls the way its server does on the wire — whole answers
and server-sent-event streams, with its own index and id conventions, usage chunks and
extra fields — so the client is tested against the framings people actually run. Sources:
each server's OpenAI-compatible endpoint as of late 2026 (OpenAI, Ollama 0.20, vLLM,
llama.cpp server, LM Studio, OpenRouter, DeepSeek).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Call = tuple[str | None, str, str]
"""``(id or None, name, arguments as JSON text)``."""

USAGE = {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    stream: Callable[[list[Call]], str]
    whole: Callable[[list[Call]], dict[str, Any]]


def sse(chunks: Iterable[dict[str, Any] | str], *, done: bool = True) -> str:
    """``data:`` lines; a plain string is sent as is (comments, blank keep-alives)."""
    lines = [c if isinstance(c, str) else f"data: {json.dumps(c)}\n\n" for c in chunks]
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines)


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _choice(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}


def _with_id(call_id: str | None, fragment: dict[str, Any]) -> dict[str, Any]:
    return fragment if call_id is None else {"id": call_id, **fragment}


def _whole(calls: list[Call], *, content: Any = None, **extra: Any) -> dict[str, Any]:
    tool_calls = [
        _with_id(call_id, {"type": "function", "function": {"name": name, "arguments": args}})
        for call_id, name, args in calls
    ]
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": USAGE,
        **extra,
    }


def _index_stream(
    calls: list[Call],
    *,
    fragment: int,
    first_has_arguments: bool = True,
    repeat_id: bool = False,
) -> list[dict[str, Any]]:
    """The common convention: one index per call, the id and name once, arguments in pieces."""
    out = []
    for index, (call_id, name, args) in enumerate(calls):
        fn: dict[str, Any] = {"name": name}
        if first_has_arguments:
            fn["arguments"] = ""
        first = _with_id(call_id, {"index": index, "type": "function", "function": fn})
        out.append(_choice({"tool_calls": [first]}))
        for piece in pieces(args, fragment):
            part: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if repeat_id:
                part = _with_id(call_id, {**part, "type": "function"})
            out.append(_choice({"tool_calls": [part]}))
    return out


def openai_stream(calls: list[Call]) -> str:
    return sse(
        [
            _choice({"role": "assistant", "content": None}),
            *_index_stream(calls, fragment=5),
            _choice({}, "tool_calls"),
            {"choices": [], "usage": USAGE},  # stream_options.include_usage
        ]
    )


def ollama_stream(calls: list[Call]) -> str:
    """Ollama 0.20: every call whole in its own chunk, all at index 0, each with its id."""
    chunks: list[dict[str, Any]] = []
    for call_id, name, args in calls:
        part = _with_id(
            call_id,
            {"index": 0, "type": "function", "function": {"name": name, "arguments": args}},
        )
        chunks.append(_choice({"role": "assistant", "content": "", "tool_calls": [part]}))
    chunks.append(_choice({"role": "assistant", "content": ""}, "tool_calls"))
    chunks.append({"choices": [], "usage": USAGE})
    return sse(chunks)


def vllm_stream(calls: list[Call]) -> str:
    """vLLM: the first fragment has the name but no arguments; ``logprobs`` on every choice."""
    body = _index_stream(calls, fragment=3, first_has_arguments=False)
    for chunk in body:
        chunk["choices"][0]["logprobs"] = None
    return sse(
        [
            _choice({"role": "assistant", "content": ""}, logprobs=None),
            *body,
            _choice({}, "tool_calls", logprobs=None, stop_reason=None),
            {"choices": [], "usage": USAGE},
        ]
    )


def llamacpp_stream(calls: list[Call]) -> str:
    """llama.cpp server: small argument pieces; usage and timings on the finishing chunk."""
    finish = _choice({}, "tool_calls")
    finish.update(usage=USAGE, timings={"prompt_n": 42, "predicted_n": 7})
    return sse([_choice({"role": "assistant"}), *_index_stream(calls, fragment=2), finish])


def lmstudio_stream(calls: list[Call]) -> str:
    """LM Studio: the id (and type) repeated on every fragment of a call."""
    return sse(
        [
            _choice({"role": "assistant"}),
            *_index_stream(calls, fragment=4, repeat_id=True),
            _choice({}, "tool_calls"),
            {"choices": [], "usage": USAGE},
        ]
    )


def openrouter_stream(calls: list[Call]) -> str:
    """OpenRouter: keep-alive comments, ``native_finish_reason``, usage (and cost) last."""
    return sse(
        [
            ": OPENROUTER PROCESSING\n\n",
            _choice({"role": "assistant", "content": ""}, native_finish_reason=None),
            ": OPENROUTER PROCESSING\n\n",
            *_index_stream(calls, fragment=6),
            _choice({}, "tool_calls", native_finish_reason="tool_calls"),
            {"choices": [], "usage": {**USAGE, "cost": 0.0001}},
        ]
    )


def deepseek_stream(calls: list[Call]) -> str:
    """DeepSeek: reasoning deltas before the calls; usage on the finishing chunk."""
    finish = _choice({"content": ""}, "tool_calls")
    finish["usage"] = USAGE
    return sse(
        [
            _choice({"role": "assistant", "content": None, "reasoning_content": "Thinking"}),
            _choice({"content": None, "reasoning_content": " it over."}),
            *_index_stream(calls, fragment=8),
            finish,
        ]
    )


DIALECTS = [
    Dialect("openai", openai_stream, _whole),
    Dialect("ollama", ollama_stream, lambda calls: _whole(calls, content="")),
    Dialect("vllm", vllm_stream, _whole),
    Dialect("llamacpp", llamacpp_stream, lambda calls: _whole(calls, timings={"prompt_n": 42})),
    Dialect("lmstudio", lmstudio_stream, _whole),
    Dialect("openrouter", openrouter_stream, lambda calls: _whole(calls, provider="Fake")),
    Dialect(
        "deepseek",
        deepseek_stream,
        lambda calls: _whole(calls, content=""),
    ),
]
