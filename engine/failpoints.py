"""Crash points for the kill -9 tests: ``CHATHUB_FAILPOINTS=after_tool_rows,...``.

A named point the variable lists kills the process with SIGKILL right there, the way a
power cut would: no cleanup, no flush. Unset (always, outside those tests) it is a no-op
costing one environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "CHATHUB_FAILPOINTS"


def failpoint(name: str) -> None:
    listed = os.environ.get(ENV_VAR)
    if listed and name in listed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
