"""chathub's front ends: Telegram, the HTTP app, the terminal, and ``chathub`` itself."""

import os
import sys

# httpx imports its command-line client (click, rich, pygments: ~35 ms and ~6 MB at every
# start) whenever those happen to be installed, as the dev tools install rich. chathub
# never runs it; a None entry makes that import fail as if they were missing, and httpx
# then leaves its `main` a stub. (setdefault: whoever imported it first keeps it.)
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

# pydantic looks for plugins (the entry points of every installed distribution) when it
# builds its first model: ~15 ms and 0.5 MB at every start, and chathub uses none. An
# operator who wants one sets PYDANTIC_DISABLE_PLUGINS themselves (setdefault keeps theirs).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
