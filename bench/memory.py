"""Long-term memory's bar (issue 23), as far as it is built: indexing throughput and
``search_sessions`` latency over many stored messages, on SQLite and on PostgreSQL.

    .venv/bin/python bench/memory.py [--messages 100000] [--postgres URL]

PostgreSQL runs when ``--postgres`` or ``CHATHUB_TEST_POSTGRES_URL`` names a server (a
database of its own is made and dropped). Two vocabularies: a Zipf-like one of 5,000
words (close to chat text) and 37 words (every term very common: the worst case).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.schema import LAYERS
from engine.store import Store
from engine.store.schema import chat_history, utcnow
from memory.indexer import Indexer
from memory.search import Search
from tests.pg import POSTGRES_URL_ENV, fresh_postgres_database

SOURCES = 50
SESSIONS = 200
QUERIES = 200
FEW_WORDS = [
    "trip",
    "hotel",
    "lisbon",
    "meeting",
    "recipe",
    "dog",
    "cat",
    "paint",
    "kitchen",
    "invoice",
    "acme",
    "flight",
    "tokyo",
    "garden",
    "tomato",
    "basil",
    "marathon",
    "berlin",
    "novel",
    "bike",
    "lock",
    "service",
    "toyota",
    "board",
    "room",
    "project",
    "aurora",
    "wifi",
    "cabin",
    "password",
    "birthday",
    "sister",
    "orchid",
    "vegetarian",
    "meat",
    "fish",
]
MANY_WORDS = [f"word{i}" for i in range(5000) for _ in range(max(1, 200 // (i + 1)))]


async def fill(store: Store, messages: int, words: list[str], rnd: random.Random) -> None:
    sessions = [
        (await store.sessions.create(f"telegram:{i % SOURCES}")).id for i in range(SESSIONS)
    ]
    frames = [(await store.sessions.root_frame(s)).id for s in sessions]
    now = utcnow()

    def write(conn: Any, rows: list[dict[str, Any]]) -> None:
        conn.execute(chat_history.insert(), rows)

    for start in range(0, messages, 5000):
        rows = [
            {
                "session_stack_id": frames[i % SESSIONS],
                "role": "user" if i % 2 else "assistant",
                "content": " ".join(rnd.choice(words) for _ in range(25)),
                "created_at": now,
            }
            for i in range(start, min(messages, start + 5000))
        ]
        await store.db.run(write, rows)


async def measure(url: str, backend: str, vocabulary: str, messages: int) -> None:
    words = MANY_WORDS if vocabulary == "5,000 words" else FEW_WORDS
    rnd = random.Random(1)
    store = await Store.open(url, LAYERS)
    try:
        await fill(store, messages, words, rnd)
        started = time.perf_counter()
        written = await Indexer(store.db).catch_up()
        took = time.perf_counter() - started
        search = Search(store.db)
        latencies = []
        for q in range(QUERIES):
            query = " ".join(rnd.sample(sorted(set(words)), 3))
            started = time.perf_counter()
            await search.sessions(f"telegram:{q % SOURCES}", query, limit=5)
            latencies.append((time.perf_counter() - started) * 1000)
        latencies.sort()
        p50 = statistics.median(latencies)
        p99 = latencies[int(len(latencies) * 0.99) - 1]
        print(
            f"{backend:<10} | {vocabulary:<11} | {written / took:>9,.0f} msg/s | "
            f"{p50:>6.1f} ms | {p99:>6.1f} ms | {'met' if p99 <= 20 else 'MISSED'}"
        )
    finally:
        await store.close()


async def run(args: argparse.Namespace) -> None:
    print(
        f"memory: {args.messages:,} messages in {SESSIONS} sessions of {SOURCES} chats, indexed "
        f"by one catch-up; then {QUERIES} searches of 3 words, each scoped to one chat"
    )
    print(
        f"{'backend':<10} | {'vocabulary':<11} | {'indexing':>15} | {'p50':>9} | {'p99':>9} | p99 <= 20 ms"
    )
    for vocabulary in ("5,000 words", "37 words"):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite+aiosqlite:///{tmp}/memory.db"
            await measure(url, "SQLite", vocabulary, args.messages)
        if args.postgres:
            async with fresh_postgres_database(args.postgres) as url:
                await measure(url, "PostgreSQL", vocabulary, args.messages)
    if not args.postgres:
        print(f"PostgreSQL: skipped (set {POSTGRES_URL_ENV} or pass --postgres URL)")
    print(
        "Not built yet (issue 23's later parts): the profile's added cost per turn, memory "
        "with 1,000 users' profiles, the hybrid ranking."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--postgres", default=os.environ.get(POSTGRES_URL_ENV))
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
