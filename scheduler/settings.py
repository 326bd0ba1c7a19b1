"""The scheduler's variables: the tic session's interval and the limits on cron jobs."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from engine.config import SETTINGS_CONFIG

__all__ = ["SchedulerSettings"]


class SchedulerSettings(BaseSettings):
    """Field names are the variable names, lower-cased (DESIGN §8)."""

    model_config = SETTINGS_CONFIG

    tic_interval_seconds: int = Field(default=900, ge=0)
    scheduler_min_period_seconds: int = Field(default=60, ge=1)
    scheduler_max_jobs_per_source: int = Field(default=50, ge=0)
