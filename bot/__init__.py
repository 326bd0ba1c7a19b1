"""chathub's front ends: Telegram, the HTTP app, the terminal, and ``chathub`` itself."""

import sys

# httpx imports its command-line client (click, rich, pygments: ~35 ms and ~6 MB at every
# start) whenever those happen to be installed, as the dev tools install rich. chathub
# never runs it; a None entry makes that import fail as if they were missing, and httpx
# then leaves its `main` a stub. (setdefault: whoever imported it first keeps it.)
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
