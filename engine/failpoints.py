"""Crash points for the kill -9 tests: ``CHATHUB_FAILPOINTS=after_tool_rows,...``.

A named point the variable lists kills the process with SIGKILL right there, the way a
power cut would: no cleanup, no flush. Listed as ``stop:<name>`` it stops the process
with SIGSTOP there instead, once (a pause at that very moment, for the fleet's tests: the
process goes on when sent SIGCONT). Unset (always, outside those tests) it is a no-op
costing one environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "CHATHUB_FAILPOINTS"


def failpoint(name: str) -> None:
    listed = os.environ.get(ENV_VAR)
    if not listed:
        return
    points = listed.split(",")
    if name in points:
        os.kill(os.getpid(), signal.SIGKILL)
    pause = "stop:" + name
    if pause in points:
        os.environ[ENV_VAR] = ",".join(point for point in points if point != pause)
        os.kill(os.getpid(), signal.SIGSTOP)
