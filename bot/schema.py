"""The one migration sequence: every layer's migrations, on the one shared ``MetaData``.

The engine's come first, then the layers built on it; the engine (``engine.store``) runs
the pending ones of all of them in version order (``Store.open(url, layers=LAYERS)``).
A new layer adds its package here and takes the next free version number.
"""

from __future__ import annotations

from bot.completions.layer import COMPLETIONS
from bot.webchat.layer import WEBCHAT
from engine.store import ENGINE, Layer
from memory.layer import MEMORY
from providers.layer import PROVIDERS

__all__ = [
    "COMPLETIONS",
    "DELIVERY",
    "HTTP",
    "LAYERS",
    "MEMORY",
    "PLATFORM",
    "PROVIDERS",
    "SCHEDULER",
    "TELEGRAM",
    "WEBCHAT",
]

#: jobs, runs, events, notify dedupe (``scheduler/tables.py``): 0006, 0019
SCHEDULER = Layer("scheduler", "scheduler.migrations", "scheduler.tables")
#: users, pairing (``bot/telegram/tables.py``): 0005, 0008, 0017, 0018 (its updates, cards
#: and outbox until 0021 moved them to the delivery layer)
TELEGRAM = Layer("telegram", "bot.telegram.migrations", "bot.telegram.tables")
#: every platform's events, cards and outbox (``bot/delivery/tables.py``): 0021
DELIVERY = Layer("delivery", "bot.delivery.migrations", "bot.delivery.tables")
#: every platform's paired people and pairing codes but Telegram's
#: (``bot/platform/tables.py``): 0022
PLATFORM = Layer("platform", "bot.platform.migrations", "bot.platform.tables")
#: the web inbox's sign-ins (``bot/http/tables.py``): 0011
HTTP = Layer("http", "bot.http.migrations", "bot.http.tables")

#: the search index and per-session watermarks (``memory/tables.py``): 0013; the API
#: providers (``providers/tables.py``): 0023; the OpenAI-compatible API's conversations
#: (``bot/completions/tables.py``): 0024
LAYERS: tuple[Layer, ...] = (
    ENGINE,
    SCHEDULER,
    TELEGRAM,
    DELIVERY,
    PLATFORM,
    HTTP,
    WEBCHAT,
    MEMORY,
    PROVIDERS,
    COMPLETIONS,
)
