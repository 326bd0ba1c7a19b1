"""Never runs: its number is taken."""

from alembic.operations import Operations


def upgrade(op: Operations) -> None:
    raise AssertionError("a migration with a taken number ran")
