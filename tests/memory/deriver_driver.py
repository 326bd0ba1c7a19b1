"""A deriver in a process of its own, for the kill -9 tests (tests/memory/test_deriver_crash.py).

``python -m tests.memory.deriver_driver <database url> <model base url>``: derives every
pending session once with the model ``memory-model`` and prints ``DONE <facts changed>``.
``CHATHUB_FAILPOINTS`` (engine/failpoints.py) kills it part way.
"""

from __future__ import annotations

import asyncio
import sys

import httpx

from engine.config import ModelConfig
from engine.llm.client import OpenAICompatModel
from engine.store import Store
from memory.deriver import Deriver
from memory.facts import FactStore
from tests.memory.conftest import MEMORY_LAYERS

MODEL = "memory-model"


async def main(url: str, base_url: str) -> None:
    store = await Store.open(url, MEMORY_LAYERS)
    async with httpx.AsyncClient() as http:
        model = OpenAICompatModel(ModelConfig(name=MODEL, base_url=base_url, timeout_s=60), http)
        deriver = Deriver(store.db, lambda: [model], FactStore(store.db))
        print("READY", flush=True)
        print(f"DONE {await deriver.derive_pending()}", flush=True)
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
