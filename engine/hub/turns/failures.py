"""``FailedTurns``: a turn that raised ends in one commit, with its notice's delivery record."""

from __future__ import annotations

import logging

from sqlalchemy.engine import Connection

from engine.failpoints import failpoint
from engine.hub.adapters import AdapterRegistry
from engine.hub.protocols import FailureHook
from engine.hub.turns.inbox import Unit
from engine.hub.types import FailureNotice
from engine.session.events import Error
from engine.store import Store
from engine.store.fencing import Fenced
from engine.store.history import AlsoWithKey
from engine.store.queue import consume

__all__ = ["CRASH_NOTICE", "FailedTurns"]

log = logging.getLogger(__name__)

#: What the user sees when a turn raised; the id is in the log line with the traceback.
CRASH_NOTICE = "Sorry, your message could not be processed (error {}). Please try again."


def _guarded(hook: FailureHook, source: str, notice: str) -> AlsoWithKey | None:
    try:
        return hook(source, notice)
    except Exception:  # the failure is recorded regardless; the notice goes out live
        log.exception("failure hook for %s failed", source)
        return None


class FailedTurns:
    """Records the end of turns that raised (a turn whose models all failed records its own)."""

    __slots__ = ("_adapters", "_store")

    def __init__(self, store: Store, adapters: AdapterRegistry) -> None:
        self._store = store
        self._adapters = adapters

    async def record(self, source: str, session_id: int, unit: Unit | None, notice: str) -> Error:
        """Record a turn that raised as ended, in one commit with the notice's delivery.

        Its unanswered messages are marked failed (recovery never runs them again), a
        message it never stored leaves the queue or has the caller's record settled (it is
        not handed over again), and the adapter's ``on_failure`` rows are written. The
        returned event is what to publish: ``FailureNotice`` when the notice was recorded.
        """
        hook = self._adapters.failure_hook(source)
        notice_unit = _guarded(hook, source, notice) if hook is not None else None
        recorded: list[str] = []

        def also(conn: Connection, key: str) -> None:
            if unit is not None and unit.queued_id is not None:
                consume(conn, unit.queued_id)  # not stored yet: dropped, never silently
            if unit is not None and unit.also is not None:
                unit.also(conn)
            if notice_unit is not None:
                notice_unit(conn, key)
                recorded.append(key)

        try:
            frame = await self._store.sessions.root_frame(session_id)
            await self._store.history.fail_unanswered(frame.id, also=also)
        except Fenced:
            raise  # the source is another process's now: it resumes the turn, no notice
        except Exception:  # the database failed too: the notice still goes out, live
            log.exception("could not record the failed turn of %s", source)
            return Error(notice)
        failpoint("after_failed_turn")
        return FailureNotice(notice, recorded[0]) if recorded else Error(notice)
