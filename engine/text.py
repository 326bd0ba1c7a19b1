"""Text from outside made safe for everything downstream (the database, a model request,
a platform's API)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["clean_text", "strict_json"]


def clean_text(text: str) -> str:
    """``text`` that every encoder downstream accepts, at the same UTF-16 offsets.

    A lone surrogate (JSON ``"\\ud800"`` decodes to one) cannot be encoded as UTF-8, so
    the database, the model request and Telegram itself would each fail on it; NUL is
    refused by PostgreSQL. Each becomes U+FFFD, one UTF-16 unit like what it replaces,
    so entity offsets stay right. A surrogate pair split over two characters is joined.
    """
    if text.isascii() and "\x00" not in text:
        return text  # the common case, without an encode
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def strict_json(raw: str) -> Any:
    """``raw`` parsed as JSON proper: ``NaN`` and ``Infinity`` (which ``json.loads``
    takes, and no JSON encoder writes back) are refused with ``ValueError``, as is
    nesting past the parser's depth (``RecursionError``). For text a model wrote."""
    return json.loads(raw, parse_constant=_not_json)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")
