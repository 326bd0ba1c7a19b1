"""What a ``POST /v1/chat/completions`` asks: its body read within its limit, the agent,
the conversation it names, the client's instructions, the dialog and what the
conversation remembers of each of its messages, the last message's text and images."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from starlette.requests import Request

from bot.completions.conversations import digest
from bot.completions.images import Image, decode_images
from bot.completions.protocol import ApiError, ChatMessage, CompletionRequest, parse_request
from bot.http.models import RequestError, parse_json, read_body

__all__ = [
    "CONVERSATION_HEADER",
    "MAX_BODY_BYTES",
    "MAX_CARRIED_CHARS",
    "Asked",
    "asked_of",
    "context_of",
    "read_request",
]

#: A request's body at most (a long conversation's whole history fits).
MAX_BODY_BYTES = 1024 * 1024
#: At most this much of what the client carried and the conversation did not hold is given
#: to the agent (the newest of it).
MAX_CARRIED_CHARS = 32_000
CONVERSATION_HEADER = "x-chathub-conversation"
_INSTRUCTION_ROLES = ("system", "developer")


async def read_request(request: Request) -> CompletionRequest:
    try:
        raw = await read_body(request, MAX_BODY_BYTES)
        data = parse_json(raw)
    except RequestError as bad:
        if bad.status == 413:
            raise ApiError(
                413,
                f"The body is over the limit of {MAX_BODY_BYTES} bytes.",
                code="request_too_large",
            ) from None
        raise ApiError(400, bad.message) from None
    return parse_request(data)


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request asks, read from its body."""

    agent: str
    #: The conversation it names (``None``: none).
    name: str | None
    #: The client's instructions (system, developer messages).
    instructions: list[str]
    #: The rest, in order: (role, text).
    dialog: list[tuple[str, str]]
    #: One per dialog message: what the conversation remembers of it.
    digests: list[str]
    #: The last message's text and images.
    text: str
    images: list[Image]


def asked_of(request: Request, body: CompletionRequest, agent: str) -> Asked:
    """What ``body`` asks of ``agent``; ``ApiError(400)`` for a last message that is not
    the user's, or is empty, or carries images that cannot be taken."""
    messages = body.messages
    last = messages[-1]
    if last.role != "user":
        raise ApiError(
            400,
            f"The last message must be the user's (its role is '{last.role}').",
            param="messages",
        )
    images = decode_images(last.image_urls())
    text = last.text()
    if not text.strip() and not images:
        raise ApiError(400, "The last message is empty.", param="messages")
    instructions: list[str] = []
    dialog: list[tuple[str, str]] = []
    digests: list[str] = []
    for message in messages:
        said = message.text()
        if message.role in _INSTRUCTION_ROLES:
            if said.strip():
                instructions.append(said)
            continue
        dialog.append((message.role, said))
        digests.append(digest(message.role, said + _images_named(message)))
    return Asked(
        agent=agent,
        name=_name(request, body),
        instructions=instructions,
        dialog=dialog,
        digests=digests,
        text=text,
        images=images,
    )


def _images_named(message: ChatMessage) -> str:
    """A message's images named by their URLs' digests (the client sends the same URL
    every time it sends the history)."""
    urls = message.image_urls()
    return "".join(f"\0image:{hashlib.sha256(url.encode()).hexdigest()}" for url in urls)


def _name(request: Request, body: CompletionRequest) -> str | None:
    """The conversation the request names: the header, else ``user`` (``None``: none)."""
    named = request.headers.get(CONVERSATION_HEADER)
    if named is None:
        named = body.user
    if named is None or not named.strip():
        return None
    named = named.strip()
    if len(named) > 200 or not named.isprintable():
        raise ApiError(
            400,
            "A conversation's name is at most 200 printable characters.",
            param="user",
        )
    return named


def context_of(instructions: list[str], carried: list[tuple[str, str]]) -> str | None:
    """What the client sent beside its message for this turn: its instructions, and the
    messages it carried that the conversation does not hold (newest kept)."""
    parts = []
    if instructions:
        parts.append(
            "The client of this conversation (chathub's OpenAI-compatible API) gives these "
            "instructions:\n" + "\n\n".join(instructions)
        )
    if carried:
        lines = [f"{role}: {said}" for role, said in carried]
        text = "\n\n".join(lines)[-MAX_CARRIED_CHARS:]
        parts.append(
            "Earlier messages of this conversation, as the client carried them (they are not "
            "in your history):\n" + text
        )
    return "\n\n".join(parts) or None
