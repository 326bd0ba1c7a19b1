"""Which conversations a socket may open: each is the hub source ``web:<id>``.

The service's are ``store.py``'s (created over HTTP first); ``AnyConversation`` lets an
API client name its own.
"""

from __future__ import annotations

import re
from typing import Protocol

from bot.webchat.layer import SOURCE_PREFIX

__all__ = ["PREFIX", "AnyConversation", "ConversationDirectory", "is_conversation_id", "source_of"]

PREFIX = SOURCE_PREFIX
_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")


def is_conversation_id(value: str) -> bool:
    return _ID.fullmatch(value) is not None


def source_of(conversation_id: str) -> str:
    return f"{PREFIX}{conversation_id}"


class ConversationDirectory(Protocol):
    async def is_open(self, conversation_id: str) -> bool:
        """Whether the conversation exists and was not deleted."""

    async def used(self, conversation_id: str) -> None:
        """A message was sent in it (the sidebar lists it first)."""


class AnyConversation:
    """Every well-formed id is a conversation (an API client names its own)."""

    async def is_open(self, conversation_id: str) -> bool:
        return is_conversation_id(conversation_id)

    async def used(self, conversation_id: str) -> None:
        return None
