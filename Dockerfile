FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

# Every package of pyproject's [tool.setuptools.packages.find] include
# (tests/deploy/test_compose.py checks the two lists agree).
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY bot ./bot
COPY scheduler ./scheduler
COPY memory ./memory
COPY voice ./voice
COPY providers ./providers
RUN pip install '.[postgres]'

RUN useradd --create-home --uid 10001 chathub \
    && mkdir -p /data /workspace \
    && chown chathub:chathub /data /workspace
USER chathub

ENV DATABASE_URL=sqlite+aiosqlite:////data/chathub.db \
    CHATHUB_WORKSPACE=/workspace
VOLUME ["/data", "/workspace"]

ENTRYPOINT ["chathub"]
CMD ["serve"]
