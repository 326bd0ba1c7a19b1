"""A failure of ours while handling someone's message or tap: logged, and said in a sentence.

The person affected is told a short error id, never the exception: they can quote it, and
the log line with the traceback is found by it.
"""

from __future__ import annotations

import logging
import secrets

__all__ = ["SORRY_MESSAGE", "SORRY_TAP", "report_failure"]

SORRY_MESSAGE = "Sorry, something went wrong while handling your message (error {error})."
SORRY_TAP = "Sorry, something went wrong while handling your tap (error {error})."


def report_failure(log: logging.Logger, what: str) -> str:
    """Log the exception being handled under a fresh short id; returns the id."""
    error = secrets.token_hex(3)
    log.exception("%s failed (error %s)", what, error)
    return error
