# `make run` and `make test` each (re)create .venv when it is missing or pyproject.toml is newer.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test lint format bench fuzz clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/chathub run

# Three pytest workers (pytest-xdist) on two cores, a test file each at a time: the suite
# waits on subprocesses, HTTP and the databases part of the time (two workers: 10.5
# minutes here, three: 8, when the suite was smaller; four measured no faster than three
# on 2026-12-07). Each worker has its own PostgreSQL and SQLite templates
# (tests/pg.py). `make test TEST_WORKERS=0` runs in one process. Files are handed out in
# the order tests/conftest.py gives them, the slowest first (xdist's own order, the most
# tests first, handed out last a file of seven tests that runs 90 s: a tail of it).
TEST_WORKERS ?= 3
# The project's own modules compiled once, before the workers and the hundreds of
# `chathub` processes the tests start each import them (an environment with
# PYTHONDONTWRITEBYTECODE set compiled every module in every process: 0.3 s more per
# process start here); pytest keeps its rewritten test modules too.
CODE := bot engine memory providers scheduler voice tests bench

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/python -m compileall -q -j 0 $(CODE)
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(VENV)/bin/python -P bench/engine_overhead.py
	$(VENV)/bin/python -P bench/hub_throughput.py
	$(VENV)/bin/python -P bench/telegram_e2e.py
	$(VENV)/bin/python -P bench/discord_e2e.py
	$(VENV)/bin/python -P bench/slack_e2e.py
	$(VENV)/bin/python -P bench/matrix_e2e.py
	$(VENV)/bin/python -P bench/voice_e2e.py
	$(VENV)/bin/python -P bench/openai_api.py
	$(VENV)/bin/python -P bench/scheduler_scale.py
	$(VENV)/bin/python -P bench/subagents_parallel.py
	$(VENV)/bin/python -P bench/compaction.py
	$(VENV)/bin/python -P bench/memory_recall.py
	$(VENV)/bin/python -P bench/layers.py
	$(VENV)/bin/python -P bench/message_path.py

fuzz: $(STAMP)
	CHATHUB_FUZZ_EXAMPLES=10000 $(VENV)/bin/pytest -q -s tests/bot/http/test_fuzz.py

clean:
	rm -rf $(VENV) .pytest_cache
