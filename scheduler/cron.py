"""Cron schedules: crontab-style specs evaluated in an IANA time zone (pure; no I/O).

Specs have 5 fields (``min hour dom mon dow``), 6 (seconds first) or 7 (seconds first, year
last), or a nickname (``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/
``@midnight``, ``@hourly``). A field is a comma list of ``*``, ``N``, ``N-M``, each optionally
with ``/STEP`` (``N/STEP`` means ``N-max/STEP``); months and weekdays also take names (``jan``,
``mon``). Crontab rules hold throughout:

* weekdays: 0 and 7 are Sunday, ``1-5`` is Monday–Friday (APScheduler 3 numbers 0=Monday; the
  fields are expanded here and handed to it as names, so it never sees a crontab number);
  a range may end with ``sun`` (``fri-sun``);
* day-of-month and day-of-week: when both are restricted (neither starts with ``*``), a day
  matching EITHER fires (Vixie cron); otherwise both must match (``*`` matches everything);
* years run 1970-2099.

Fire times are wall-clock times in the schedule's zone. APScheduler matches the fields on the
wall clock alone (a trigger in UTC, so it never meets a DST transition); this module maps
each wall-clock time to instants itself:

* a wall-clock time that exists once fires at that instant;
* a time skipped by a spring-forward fires once, at the first valid instant after the gap
  (02:30 on a 02:00→03:00 day fires at 03:00); APScheduler 3.11 alone would fire at 03:30;
* a time repeated by a fall-back fires once, at its first occurrence (APScheduler 3.11 alone
  fires twice, and with a minute step it loops back in time);
* except for schedules whose hour field matches all 24 hours (``*``, ``0-23``): they follow
  the clock as it runs, so ``*/30 * * * *`` keeps firing every 30 real minutes through a fall-back
  (both passes of the repeated hour) and a spring-forward (the skipped hour has no fires).

Instants that coincide (``0 2,3 * * *`` on a spring-forward day) fire once.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from apscheduler.triggers.base import BaseTrigger

__all__ = ["CronError", "CronSchedule"]

log = logging.getLogger(__name__)


class CronError(ValueError):
    """A bad cron spec or time zone; the message names the part that is wrong."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str  # as messages name it
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] is the value low + i

    def value(self, token: str) -> int:
        if token.isdigit():
            # Past four digits no field is in range: int() of thousands of digits raises
            # (Python's digit limit) instead of saying so (found by review).
            digits = token.lstrip("0") or "0"  # "00005" is 5, as crontab reads it
            number = int(digits) if len(digits) <= 4 else None
            if number is None or not self.low <= number <= self.high:
                shown = token if len(token) <= 8 else f"{token[:8]}…"
                raise CronError(
                    f"cron spec: {self.name} {shown} out of range {self.low}-{self.high}"
                )
            return number
        lowered = token.lower()
        if lowered in self.names:
            return self.low + self.names.index(lowered)
        kind = "a number or a name" if self.names else "a number"
        raise CronError(f"cron spec: {self.name} {token!r} is not {kind}")


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31)
_MONTH = _Field(
    "month",
    1,
    12,
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
)
_DOW = _Field("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
_YEAR = _Field("year", 1970, 2099)

_NICKNAMES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_TERM = re.compile(
    r"(?:(?P<star>\*)|(?P<first>\w+)(?:-(?P<last>\w+))?)(?:/(?P<step>\w+))?", re.ASCII
)
_APS_WEEKDAYS: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab order
_DAYS_IN_MONTH: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February: leap years
_SECOND_STEP = timedelta(seconds=1)


def _expand(text: str, spec_field: _Field) -> frozenset[int]:
    """The values a crontab field matches, validated against the field's range."""
    values: set[int] = set()
    for term in text.split(","):
        match = _TERM.fullmatch(term)
        if match is None:
            raise CronError(f"cron spec: {spec_field.name} field {text!r} is not valid")
        if match["star"]:
            first, last = spec_field.low, spec_field.high
        else:
            first = spec_field.value(match["first"])
            if match["last"] is not None:
                last = spec_field.value(match["last"])
                if spec_field is _DOW and last == 0 < first and match["last"].lower() == "sun":
                    # fri-sun: the name sun ends a range as 7; sun-sun stays Sunday (it was
                    # 0-7, every day; found by review on 2026-12-06).
                    last = 7
            elif match["step"] is not None:
                last = spec_field.high
            else:
                last = first
            if first > last:
                raise CronError(
                    f"cron spec: {spec_field.name} range {match['first']}-{match['last']} is reversed"
                )
        step = 1
        if match["step"] is not None:
            given = match["step"]
            digits = given.lstrip("0")  # empty: zero
            if not given.isdigit() or not digits or len(digits) > 4:
                raise CronError(
                    f"cron spec: {spec_field.name} step {given[:8]!r} must be a number "
                    "from 1 to 9999"
                )
            step = int(digits)
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _described_weekdays(expression: str) -> str:
    """``expression`` with a stepped day-of-week (``5/1``, ``mon/2``), or a range beside a
    day of the month, written as the days it matches: cron-descriptor reads a step in its own way ("Friday through Saturday" for
    5/1, which fires on Sunday, 7, too), and the card and /jobs named the wrong days
    (until 2026-12-07; found by review)."""
    parts = expression.split()
    where = 4 if len(parts) == 5 else 5
    if len(parts) not in (5, 6, 7):
        return expression
    # A range beside a day of the month reads as both ("on day 1 of the month, Monday
    # through Friday"), though Vixie cron fires on either; a list reads "or" (until
    # 2026-12-07 the card described a monthly schedule that fires every weekday; review).
    either = "-" in parts[where] and not parts[where - 2].startswith("*")
    if "/" not in parts[where] and not either:
        return expression
    if parts[where].startswith("*") and not parts[where - 2].startswith("*"):
        # A day-of-week led by "*" restricts nothing to Vixie cron, which then fires on the
        # days of the month that are also those weekdays: written as a list, it reads as
        # a second restriction, which cron-descriptor joins with "or" (found by review).
        return expression
    days = sorted({day % 7 for day in _expand(parts[where], _DOW)})
    if len(days) == 7:  # every weekday, or any day of the month: every day
        parts[where] = parts[where - 2] = "*"
    else:
        parts[where] = ",".join(map(str, days))
    return " ".join(parts)


def _aps(values: frozenset[int], spec_field: _Field) -> str:
    """An APScheduler field expression for ``values``: ``*`` or a list of ranges."""
    if values == frozenset(range(spec_field.low, spec_field.high + 1)):
        return "*"
    ordered = sorted(values)
    ranges: list[str] = []
    start = previous = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        ranges.append(str(start) if start == previous else f"{start}-{previous}")
        if value is not None:
            start = previous = value
    return ",".join(ranges)


#: Longer than any IANA name (the longest is 32 characters).
_MAX_ZONE_CHARS = 64


def _zone(name: str) -> ZoneInfo:
    if len(name) > _MAX_ZONE_CHARS:
        raise CronError(f"timezone: {name[:20]!r}… is not an IANA time zone")
    try:
        return ZoneInfo(name)
    # OSError: a folder of the database ("Europe": IsADirectoryError), a name the file
    # system refuses (until 2026-12-06 they failed the turn; found by review).
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise CronError(f"timezone: {name!r} is not an IANA time zone") from None


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC)


def _locale_code(locale: str) -> str:
    """``en`` → ``en_US``, ``it`` → ``it_IT``: the cron-descriptor translation to load."""
    code = locale.replace("-", "_")
    if "_" in code:
        return code
    import cron_descriptor

    translations = Path(cron_descriptor.__file__).parent / "locale"
    available = sorted(path.stem for path in translations.glob(f"{code.lower()}_*.mo"))
    preferred = f"{code.lower()}_{code.upper()}"
    if preferred in available:
        return preferred
    return available[0] if available else code  # unknown: cron-descriptor falls back to English


@dataclass(frozen=True)
class CronSchedule:
    """A parsed cron spec in a time zone. Build with :meth:`parse`; times in and out are UTC."""

    spec: str  # whitespace-normalised, as given (a nickname stays a nickname)
    timezone: str
    _zone: ZoneInfo = field(repr=False, compare=False)
    # Matches wall-clock times: a naive local time is handed to it as if it were UTC.
    _wall: BaseTrigger = field(repr=False, compare=False)
    # True when every hour of the day matches: such a schedule follows the clock through DST
    # transitions instead of firing each wall-clock time exactly once (see the module doc).
    _every_hour: bool = field(repr=False, compare=False)

    @classmethod
    def parse(cls, spec: str, timezone: str) -> CronSchedule:
        normalised = " ".join(spec.split())
        parts = _NICKNAMES.get(normalised.lower(), normalised).split()
        if normalised.lower() in _NICKNAMES:
            normalised = normalised.lower()
        elif normalised.startswith("@"):
            raise CronError(
                f"cron spec: unknown nickname {normalised!r} (known: {', '.join(_NICKNAMES)})"
            )
        if len(parts) not in (5, 6, 7):
            raise CronError(f"cron spec: expected 5, 6 or 7 fields, got {len(parts)}")
        if len(parts) == 5:
            parts = ["0", *parts]
        if len(parts) == 6:
            parts = [*parts, "*"]
        sec, minute, hour, dom, month, dow, year = parts
        seconds = _expand(sec, _SECOND)
        minutes = _expand(minute, _MINUTE)
        hours = _expand(hour, _HOUR)
        days = _expand(dom, _DOM)
        months = _expand(month, _MONTH)
        weekdays = frozenset(day % 7 for day in _expand(dow, _DOW))
        years = _expand(year, _YEAR)
        zone = _zone(timezone)

        possible_days = {d for d in days if any(d <= _DAYS_IN_MONTH[m - 1] for m in months)}
        days_restricted = not dom.startswith("*")
        weekdays_restricted = not dow.startswith("*")
        common = {
            "second": _aps(seconds, _SECOND),
            "minute": _aps(minutes, _MINUTE),
            "hour": _aps(hours, _HOUR),
            "month": _aps(months, _MONTH),
            "year": _aps(years, _YEAR),
            "timezone": UTC,
        }
        # APScheduler (and its metadata lookup, ~15 ms) loads with the first cron spec parsed,
        # not with every start of a service that may have none.
        from apscheduler.triggers.combining import OrTrigger
        from apscheduler.triggers.cron import CronTrigger

        weekday_names = ",".join(_APS_WEEKDAYS[d] for d in sorted(weekdays))
        by_weekday = "*" if len(weekdays) == 7 else weekday_names
        wall: BaseTrigger
        if days_restricted and weekdays_restricted:
            # Vixie cron: a day matching either field fires. A day-of-month no listed month has
            # (31 in February) cannot fire, so only the weekday side remains.
            on_weekday = CronTrigger(day_of_week=by_weekday, **common)
            wall = on_weekday
            if possible_days:
                on_day = CronTrigger(day=_aps(frozenset(possible_days), _DOM), **common)
                wall = OrTrigger([on_day, on_weekday])
        else:
            if not possible_days:
                raise CronError(
                    f"cron spec: day-of-month {dom!r} never occurs in month {month!r}: never fires"
                )
            wall = CronTrigger(
                day=_aps(frozenset(possible_days), _DOM), day_of_week=by_weekday, **common
            )
        return cls(normalised, timezone, zone, wall, len(hours) == 24)

    # -- fire times ----------------------------------------------------------------------------

    def next_fire(self, after: datetime) -> datetime | None:
        """The first fire strictly after ``after`` (aware), in UTC; None if it never fires again."""
        after = _utc(after, "after")
        local = after.astimezone(self._zone)
        cursor = local.replace(tzinfo=None, fold=0)  # fold would leak into the readings
        if local.fold == 0:
            # In the first pass of a repeated hour, the second pass (later instants) has earlier
            # wall-clock times: start the wall-clock search back there.
            first_pass, second_pass = local.utcoffset(), local.replace(fold=1).utcoffset()
            if first_pass is not None and second_pass is not None and first_pass > second_pass:
                cursor -= first_pass - second_pass
        best: datetime | None = None
        while True:
            found = self._wall.get_next_fire_time(None, cursor.replace(tzinfo=UTC))
            if found is None:
                return best
            wall_time = found.replace(tzinfo=None, fold=0)
            instants, floor = self._instants(wall_time)
            for instant in instants:
                if instant > after and (best is None or instant < best):
                    best = instant
            # Instants of later wall-clock times are never before this one's first instant.
            if best is not None and floor is not None and best <= floor:
                return best
            cursor = wall_time + _SECOND_STEP

    def fires(self, start: datetime, end: datetime) -> list[datetime]:
        """Every fire in (start, end], in UTC, in order."""
        end = _utc(end, "end")
        found: list[datetime] = []
        moment = self.next_fire(start)
        while moment is not None and moment <= end:
            found.append(moment)
            moment = self.next_fire(moment)
        return found

    def is_single_run(self, now: datetime) -> bool:
        """Exactly one fire after ``now`` (a spec pinned to a date and a year)."""
        first = self.next_fire(now)
        return first is not None and self.next_fire(first) is None

    def min_period(self, now: datetime, samples: int = 50) -> timedelta | None:
        """The smallest gap between consecutive fires among the next ``samples`` after ``now``."""
        if samples < 2:
            raise ValueError(f"samples must be at least 2, got {samples}")
        fires: list[datetime] = []
        moment = self.next_fire(now)
        while moment is not None and len(fires) < samples:
            fires.append(moment)
            moment = self.next_fire(moment)
        if len(fires) < 2:
            return None
        return min(later - earlier for earlier, later in pairwise(fires))

    def describe(self, locale: str = "en") -> str:
        """A human-readable description (cron-descriptor), e.g. "At 08:00 AM, Monday through Friday"."""
        expression = _described_weekdays(_NICKNAMES.get(self.spec, self.spec))
        # Crontab weekdays (0 and 7 Sunday) are cron-descriptor's default; a 6-field spec is read
        # seconds-first since its last field (day-of-week) is never a 4-digit year.
        from cron_descriptor import ExpressionDescriptor, Options

        options = Options(locale_code=_locale_code(locale), day_of_week_start_index_zero=True)
        try:
            return ExpressionDescriptor(expression, options).get_description()
        except Exception:  # its own reading refuses some valid specs ("06,07" weekdays)
            log.info("cron-descriptor could not describe %r; shown as written", self.spec)
            return self.spec

    # -- wall clock → instants -----------------------------------------------------------------

    def _instants(self, wall_time: datetime) -> tuple[list[datetime], datetime | None]:
        """The instants (UTC, ascending) at which the wall-clock time ``wall_time`` fires, and
        the earliest instant of this wall-clock time if it exists (None in a spring-forward gap).
        """
        first = wall_time.replace(tzinfo=self._zone).astimezone(UTC)
        second = wall_time.replace(tzinfo=self._zone, fold=1).astimezone(UTC)
        if first == second:  # the usual case: the time exists once
            return [first], first
        if first < second:  # repeated by a fall-back: fold=0 is the first pass
            return ([first, second] if self._every_hour else [first]), first
        # Skipped by a spring-forward (fold=0 read it with the old offset, fold=1 with the new).
        return ([] if self._every_hour else [self._gap_end(second, first)]), None

    def _gap_end(self, before: datetime, after: datetime) -> datetime:
        """The transition instant between ``before`` (old offset) and ``after`` (new offset)."""
        new_offset = after.astimezone(self._zone).utcoffset()
        low, high = before, after  # low has the old offset, high the new one
        while high - low > _SECOND_STEP:
            middle = low + (high - low) // 2
            middle -= timedelta(microseconds=middle.microsecond)
            if middle.astimezone(self._zone).utcoffset() == new_offset:
                high = middle
            else:
                low = middle
        return high
