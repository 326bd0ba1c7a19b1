"""What background runs (a job's, the tic's) left in memory until 2026-12-07: the
documents of their sessions, which every job could search under the source ``cron``, and
the facts learned for people of the platforms ``cron`` and ``tic``, whom no ``/forget_me``
reaches. Memory passes over such sessions since (docs/memory.md)."""

from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    op.execute(
        "DELETE FROM memory_documents WHERE session_id IN "
        "(SELECT id FROM chat_sessions WHERE is_ephemeral)"
    )
    background = "SELECT user_id FROM memory_identities WHERE platform IN ('cron', 'tic')"
    op.execute(f"DELETE FROM memory_facts WHERE user_id IN ({background})")
    op.execute("DELETE FROM memory_identities WHERE platform IN ('cron', 'tic')")
