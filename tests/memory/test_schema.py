"""With the memory layer, a new database created whole still equals one migrated step by
step (the full-text index included: FTS5's shadow tables, PostgreSQL's GIN index)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.store import Store
from engine.store.db import _version_table, connect
from tests.engine.store.test_fresh_schema import describe
from tests.memory.conftest import MEMORY_LAYERS
from tests.pg import database_url


async def schema_of(url: str, *, one_by_one: bool) -> dict[str, Any]:
    if one_by_one:
        db = connect(url)
        await db.run(lambda conn: _version_table.create(conn))
        await db.close()
    store = await Store.open(url, MEMORY_LAYERS)
    try:
        return await store.db.run(describe)
    finally:
        await store.close()


async def test_whole_and_step_by_step_agree_with_memory(backend: str, tmp_path: Path) -> None:
    (tmp_path / "whole").mkdir()
    (tmp_path / "steps").mkdir()
    async with database_url(backend, tmp_path / "whole") as whole_url:
        whole = await schema_of(whole_url, one_by_one=False)
    async with database_url(backend, tmp_path / "steps") as steps_url:
        steps = await schema_of(steps_url, one_by_one=True)
    assert "memory_documents" in whole
    assert (13, "memory", "memory") in whole["recorded"]
    assert set(whole) == set(steps)
    for name in whole:
        assert whole[name] == steps[name], name
