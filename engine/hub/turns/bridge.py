"""``TurnBridge``: one turn's events onto the hub's bus, with its adapter's delivery hooks."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from engine.hub.protocols import AnswerHook, FailureHook, Publish
from engine.hub.types import FailureNotice
from engine.session.events import Error, TurnEvent
from engine.store.history import AlsoWithKey, AlsoWithRow

__all__ = ["TurnBridge"]


class TurnBridge:
    """The ``emit`` of a turn (``RecordsAnswers``): events tagged with the source, and the
    adapter's rows for the transactions that store the answer or end a failed turn."""

    __slots__ = ("_answer_hook", "_failure_hook", "_publish", "_recorded", "_session_id", "_source")

    def __init__(
        self,
        publish: Publish,
        source: str,
        session_id: int,
        answer_hook: AnswerHook | None,
        failure_hook: FailureHook | None,
    ) -> None:
        self._publish, self._source, self._session_id = publish, source, session_id
        self._answer_hook, self._failure_hook = answer_hook, failure_hook
        self._recorded: tuple[str, str] | None = None  # (notice, key) stored for delivery

    def __call__(self, event: TurnEvent) -> None:
        recorded = self._recorded
        if recorded is not None and isinstance(event, Error) and event.message == recorded[0]:
            # The failure's notice was stored with its failed mark: the adapter sends that.
            self._recorded = None
            event = FailureNotice(event.message, recorded[1])
        self._publish(self._source, self._session_id, event)

    def answer_unit(self, content: str) -> AlsoWithRow | None:
        hook = self._answer_hook
        return hook(self._source, content) if hook is not None else None

    def failure_unit(self, notice: str) -> AlsoWithKey | None:
        unit = self._failure_hook(self._source, notice) if self._failure_hook else None
        if unit is None:
            return None

        def record(conn: Connection, key: str) -> None:
            unit(conn, key)
            self._recorded = (notice, key)

        return record
