"""Settings: the environment (and ``.env``) plus an optional TOML file for lists.

The environment variable names are a public contract (README, ``.env.example``).
A wrong value stops start-up with a ``ConfigError`` that names the variable.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.mcp.config import McpServerConfig, parse_mcp_servers


class ConfigError(Exception):
    """A configuration mistake; the message starts with the variable's name."""


def _system_timezone() -> str:
    try:
        from tzlocal import get_localzone_name

        return get_localzone_name() or "UTC"
    except Exception:  # an unreadable /etc/localtime must not stop start-up
        return "UTC"


#: How every layer's settings read the environment (bot/settings.py composes them):
#: ``env_ignore_empty``: ``TELEGRAM_OWNER_ID=`` (as a copied ``.env.example`` or a compose
#: file writes it) means "unset", not "the empty string" (not an integer; CHATHUB_CONFIG=".").
SETTINGS_CONFIG = SettingsConfigDict(
    env_file=".env", extra="ignore", case_sensitive=False, env_ignore_empty=True
)


def split_csv(value: Any) -> list[str]:
    """A comma-separated variable (or a list given directly) as its non-empty parts."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def http_url(value: str) -> str:
    """An ``http(s)://`` URL without its trailing slash (a ValueError names the problem):
    a host, a port that is a number up to 65535, no space. A mistyped port or bracket
    passed until 2026-12-06 and broke every request with an error nothing expected
    (voice notes lost, ``providers test`` a traceback; found by review)."""
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{value!r} must start with http:// or https://")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"{value!r} holds a space or a control character")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - read to check it: a port that is no number raises
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL: {exc}") from None
    if not parts.hostname:
        raise ValueError(f"{value!r} names no host")
    if "?" in value or "#" in value:
        # Requests are made by appending a path: it landed inside the query, and every
        # one failed as a missing model (found by review on 2026-12-06).
        raise ValueError(f"{value!r} has a query or a fragment; give the address alone")
    return value.rstrip("/")


class EngineSettings(BaseSettings):
    """The engine's variables of DESIGN §8: the model, the database, the workspace, who
    decides approvals. Field names are the variable names, lower-cased; each outer layer
    has its own settings class (Telegram, HTTP, scheduler), composed in bot/settings.py."""

    model_config = SETTINGS_CONFIG

    #: Who may decide an approval card (engine/approval/deciders.py, docs/approval.md).
    approvers: Literal["requester+owner", "owner", "allowed"] = "requester+owner"

    llm_base_url: str = "http://localhost:11434/v1"
    llm_api_key: str = ""
    llm_model: str | None = None
    llm_fallback_models: Annotated[list[str], NoDecode] = Field(default_factory=list)

    database_url: str = "sqlite+aiosqlite:///data/chathub.db"
    chathub_workspace: Path = Path("./workspace")
    chathub_timezone: str = Field(default_factory=_system_timezone)
    chathub_config: Path | None = None

    @field_validator("llm_fallback_models", mode="before")
    @classmethod
    def _fallback_models(cls, value: Any) -> list[str]:
        return split_csv(value)

    @field_validator("llm_base_url")
    @classmethod
    def _llm_base_url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        schemes = ("sqlite://", "sqlite+aiosqlite://", "postgresql://", "postgresql+asyncpg://")
        if not value.startswith(schemes):
            raise ValueError("must start with sqlite+aiosqlite:// or postgresql+asyncpg://")
        return value

    @field_validator("chathub_timezone")
    @classmethod
    def _chathub_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone name") from None
        return value

    @property
    def timezone(self) -> ZoneInfo:
        return ZoneInfo(self.chathub_timezone)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One model a turn may use; the first is preferred, the rest are fallbacks."""

    name: str
    base_url: str
    api_key: str = ""
    cache_hints: bool = False
    timeout_s: float = 120.0
    stream: bool = True
    #: Offer tools with portable schemas: no ``$schema``, ``$ref`` inlined (Gemini's and some
    #: llama.cpp endpoints answer 400 otherwise; engine/llm/tool_schemas.py, docs/mcp.md).
    strict_tool_schemas: bool = True


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Turn-engine limits (TOML ``[engine]``)."""

    max_tool_rounds: int = 25
    max_tool_result_chars: int | None = 20_000
    max_tool_output_chars: int = 50_000
    max_history_messages: int = 400
    command_timeout_s: float = 120.0
    max_agent_depth: int = 3
    max_parallel_subagents: int = 4


@dataclass(frozen=True, slots=True)
class HubConfig:
    """ChatHub behaviour (TOML ``[hub]``)."""

    #: A source with no queued message and no turn for this long leaves memory.
    idle_evict_s: float = 900.0
    #: Wait this long after a message to an idle source, to take a burst as one queue.
    debounce_s: float = 0.0
    #: Longer messages are refused with a clear error (they would not fit a context).
    max_message_chars: int = 32_000
    #: Notifications arriving within this window are delivered as one batch.
    notify_window_s: float = 0.2


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """Context compaction (TOML ``[compaction]``)."""

    enabled: bool = False
    #: Compact when the previous turn's input tokens (or the estimate) reach this.
    threshold_tokens: int = 60_000
    #: At least this many of the newest rows stay raw (more when a turn straddles it).
    keep_recent: int = 20
    #: The summarising model; ``None``: the first configured model (fallbacks follow).
    model: str | None = None
    #: A longer summary is cut to this many characters.
    max_summary_chars: int = 8_000


@dataclass(frozen=True, slots=True)
class AppConfig:
    #: The engine's settings; ``chathub serve`` gives the composed ones (bot/settings.py).
    settings: EngineSettings
    models: tuple[ModelConfig, ...]
    engine: EngineConfig = field(default_factory=EngineConfig)
    agents_dir: Path | None = None
    hub: HubConfig = field(default_factory=HubConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    mcp_servers: tuple[McpServerConfig, ...] = ()


S = TypeVar("S", bound=EngineSettings)


def read_settings(cls: type[S], **overrides: Any) -> S:
    """``cls`` from the environment and ``.env``; a wrong value is a ``ConfigError``.

    An override that is no field of ``cls`` is a mistake (it would be ignored silently)."""
    unknown = {name for name in overrides if not name.startswith("_")} - set(cls.model_fields)
    if unknown:
        raise TypeError(f"{cls.__name__} has no settings {sorted(unknown)}")
    try:
        return cls(**overrides)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc)) from None
    except UnicodeDecodeError:  # a Latin-1 password, an old editor's save
        raise ConfigError(".env: is not UTF-8 text; save it as UTF-8") from None


def load_settings(**overrides: Any) -> EngineSettings:
    return read_settings(EngineSettings, **overrides)


def describe_errors(exc: ValidationError) -> str:
    """Each problem as ``VARIABLE: message``."""
    problems = []
    for err in exc.errors():
        name = ".".join(str(part) for part in err["loc"]).upper() or "configuration"
        message = err["msg"].removeprefix("Value error, ")
        problems.append(f"{name}: {message}")
    return "; ".join(problems)


T = TypeVar("T")
_MODEL_KEYS = {f for f in ModelConfig.__dataclass_fields__}


def load_config(settings: EngineSettings | None = None) -> AppConfig:
    """Settings plus the TOML file named by ``CHATHUB_CONFIG`` (models, engine limits)."""
    settings = settings or load_settings()
    data = _read_toml(settings.chathub_config) if settings.chathub_config else {}
    models = _models(settings, data.get("models", []))
    engine = _table("engine", data.get("engine", {}), EngineConfig, {"command_timeout_s"})
    hub = _table(
        "hub",
        data.get("hub", {}),
        HubConfig,
        {"idle_evict_s", "notify_window_s"},
        zero_ok={"debounce_s"},
    )
    agents_dir = data.get("agents_dir")
    if agents_dir is not None and not (isinstance(agents_dir, str) and agents_dir):
        raise ConfigError("CHATHUB_CONFIG: agents_dir must be a non-empty string (a directory)")
    return AppConfig(
        settings=settings,
        models=models,
        engine=engine,
        agents_dir=Path(agents_dir) if agents_dir else None,
        hub=hub,
        compaction=_compaction(data.get("compaction", {})),
        mcp_servers=_mcp_servers(data.get("mcp_servers")),
    )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"CHATHUB_CONFIG: file {str(path)!r} does not exist") from None
    except OSError as exc:  # a directory, no permission, ...
        raise ConfigError(f"CHATHUB_CONFIG: cannot read {str(path)!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"CHATHUB_CONFIG: {path} is not valid TOML: {exc}") from None


def _models(settings: EngineSettings, entries: Any) -> tuple[ModelConfig, ...]:
    if settings.llm_fallback_models and not settings.llm_model:
        raise ConfigError("LLM_FALLBACK_MODELS: set LLM_MODEL too; the fallbacks follow it")
    defaults = {"base_url": settings.llm_base_url, "api_key": settings.llm_api_key}
    names = [settings.llm_model, *settings.llm_fallback_models] if settings.llm_model else []
    by_name: dict[str, ModelConfig] = {}
    if not isinstance(entries, list):
        raise ConfigError("CHATHUB_CONFIG: [[models]] must be an array of tables")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError(f"CHATHUB_CONFIG: models[{index}] needs a string 'name'")
        unknown = set(entry) - _MODEL_KEYS
        if unknown:
            raise ConfigError(f"CHATHUB_CONFIG: models[{index}] has unknown keys {sorted(unknown)}")
        problem = _model_problem(entry)
        if problem:
            raise ConfigError(f"CHATHUB_CONFIG: models[{index}] ({entry['name']}) {problem}")
        if "base_url" in entry:
            entry = {**entry, "base_url": http_url(entry["base_url"])}
        by_name[entry["name"]] = ModelConfig(**{**defaults, **entry})
    ordered = [by_name.pop(n, None) or ModelConfig(name=n, **defaults) for n in names]
    ordered.extend(by_name.values())
    seen: set[str] = set()
    unique = []
    for model in ordered:
        if model.name not in seen:
            seen.add(model.name)
            unique.append(model)
    return tuple(unique)


def _model_problem(entry: dict[str, Any]) -> str | None:
    if not entry["name"].strip():
        return "name must not be empty"
    base_url = entry.get("base_url")
    if base_url is not None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            return "base_url must start with http:// or https://"
        try:  # as LLM_BASE_URL is: a port past 65535 passed here until 2026-12-07 (review)
            http_url(base_url)
        except ValueError as exc:
            return f"base_url: {exc}"
    if not isinstance(entry.get("api_key", ""), str):
        return "api_key must be a string"
    for key in ("cache_hints", "stream", "strict_tool_schemas"):
        if not isinstance(entry.get(key, False), bool):
            return f"{key} must be true or false"
    if "timeout_s" in entry and not _positive_number(entry["timeout_s"]):
        return "timeout_s must be a positive number"
    return None


def _positive_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _table(
    name: str,
    entries: Any,
    cls: type[T],
    float_keys: set[str],
    *,
    zero_ok: frozenset[str] | set[str] = frozenset(),
) -> T:
    """A TOML table of positive numbers into ``cls`` (``zero_ok`` keys may also be 0)."""
    if not isinstance(entries, dict):
        raise ConfigError(f"CHATHUB_CONFIG: [{name}] must be a table")
    unknown = set(entries) - set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    if unknown:
        raise ConfigError(f"CHATHUB_CONFIG: [{name}] has unknown keys {sorted(unknown)}")
    for key, value in entries.items():
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if key in zero_ok and numeric and value == 0:
            continue
        if key in float_keys or key in zero_ok:
            if not _positive_number(value):
                raise ConfigError(f"CHATHUB_CONFIG: [{name}] {key} must be a positive number")
        elif not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ConfigError(f"CHATHUB_CONFIG: [{name}] {key} must be a positive integer")
    return cls(**entries)


def _compaction(entries: Any) -> CompactionConfig:
    if not isinstance(entries, dict):
        raise ConfigError("CHATHUB_CONFIG: [compaction] must be a table")
    unknown = set(entries) - set(CompactionConfig.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"CHATHUB_CONFIG: [compaction] has unknown keys {sorted(unknown)}")
    for key, value in entries.items():
        if key == "enabled":
            ok = isinstance(value, bool)
        elif key == "model":
            ok = isinstance(value, str) and bool(value.strip())
        else:
            minimum = 0 if key == "keep_recent" else 1
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        if not ok:
            raise ConfigError(f"CHATHUB_CONFIG: [compaction] {key} has an invalid value {value!r}")
    return CompactionConfig(**entries)


def _mcp_servers(entries: Any) -> tuple[McpServerConfig, ...]:
    try:
        return parse_mcp_servers(entries)
    except ValueError as exc:
        raise ConfigError(f"CHATHUB_CONFIG: {exc}") from None
