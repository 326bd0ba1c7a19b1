"""The scheduler's variables: the tic session's interval, the limits on cron jobs, how
long a job's run waits for a decision and how long a run's lease lasts."""

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
    #: How long a job's run waits for a decision on a call outside its grants (a job may
    #: set its own), then the call is rejected.
    scheduler_approval_wait_minutes: float = Field(default=30, gt=0, le=24 * 60)
    #: A run's lease: a process that dies mid-run has its run taken again after this long.
    scheduler_lease_seconds: float = Field(default=60, ge=1, le=3600)
