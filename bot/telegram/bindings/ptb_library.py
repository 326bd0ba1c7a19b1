"""python-telegram-bot, imported without the Telegram Passport decryption it never uses.

python-telegram-bot imports ``cryptography`` for Telegram Passport whenever it happens to
be installed (an extra of another dependency installs it): about 8 MB and 35 modules in a
process that never decrypts Passport data. Its import is refused while ``telegram`` loads
(python-telegram-bot then marks Passport decryption unavailable) and allowed again after,
for anything else that needs it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

__all__ = ["HTTPXRequest", "telegram", "tg_error"]


@contextlib.contextmanager
def _refused(name: str) -> Iterator[None]:
    if name in sys.modules:  # already loaded by someone else: nothing to save
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment]  # an import of it fails
    try:
        yield
    finally:
        if sys.modules.get(name, ...) is None:
            del sys.modules[name]


with _refused("cryptography"):
    import telegram
    import telegram.error as tg_error
    from telegram.request import HTTPXRequest
