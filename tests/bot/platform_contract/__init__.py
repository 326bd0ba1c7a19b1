"""The platform contract: what a person does and sees, written once, run on every platform.

Each scenario takes a ``driver`` (``driver.py``: ``PlatformDriver``) and is run over every
name in ``conftest.PLATFORMS`` (``telegram-ptb``, ``telegram-aiogram``, ``terminal``,
``webchat``). A driver reaches its platform from the outside only: Telegram through the
fake Bot API (``telegram_driver.py``), the terminal through its stdin and stdout
(``terminal_driver.py``), the web chat through the page's HTTP requests and its /ws/chat
socket (``webchat_driver.py``).

A new platform (Discord) adds a driver and its name to ``PLATFORMS``; the scenarios then
run on it unchanged. Marks: ``only_on(*platforms)`` for what only some platforms have (the
terminal's Ctrl-C), ``fails_on(*platforms, reason=...)`` for a known gap (a strict xfail:
closing the gap fails the run until the mark goes). What only one platform shows
(Telegram's buttons, edited cards) stays in that platform's own tests
(tests/bot/telegram_contract/).
"""
