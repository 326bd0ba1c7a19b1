"""RunContext: JSON round trip, validation and the filesystem fast path."""

from __future__ import annotations

import pytest

from engine.approval.run_context import RunContext, fast_path
from engine.session.protocols import Decision


def test_json_round_trip() -> None:
    rc = RunContext(
        security_group="cron",
        system_prompt_fragments=["Reply in English.", "Use metric units."],
        allow_fs_writes=["data/output"],
        allow_fs_reads=["logs/*"],
        working_directory="projects/x",
    )
    assert RunContext.from_json(rc.to_json()) == rc
    assert RunContext.from_json('{"security_group": "cron"}').security_group == "cron"
    assert RunContext.from_json(None) == RunContext()
    assert RunContext.from_json({"security_group": None}) == RunContext()
    assert rc.extra_system_prompt() == "Reply in English.\n\nUse metric units."


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"allow_fs_writes": ["/etc"]}, "allow_fs_writes: .*relative"),
        ({"allow_fs_reads": ["../x"]}, r"allow_fs_reads: .*\.\."),
        ({"allow_fs_writes": "data"}, "allow_fs_writes: must be a list"),
        ({"security_group": ""}, "security_group"),
        ({"colour": "red"}, "unknown field"),
        ({"read_only": "yes"}, "read_only: must be true or false"),
        ([], "JSON object"),
    ],
)
def test_bad_run_context_refused(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunContext.from_json(data)  # type: ignore[arg-type]


def test_fast_path_relaxes_require_for_granted_paths_only() -> None:
    rc = RunContext(allow_fs_writes=["data/output"], allow_fs_reads=["logs/*"])
    require = Decision.REQUIRE
    assert fast_path(require, rc, "write_file", "data/output/a.csv") is Decision.ALLOW
    assert fast_path(require, rc, "edit_file", "data/output") is Decision.ALLOW
    assert fast_path(require, rc, "write_file", "data/output-2/a.csv") is require
    assert fast_path(require, rc, "write_file", "logs/a.log") is require  # read grant only
    assert fast_path(require, rc, "read_file", "logs/a.log") is Decision.ALLOW
    assert fast_path(require, rc, "read_file", "data/output/a.csv") is Decision.ALLOW
    assert fast_path(require, rc, "execute_cmd", "data/output/a.csv") is require
    assert fast_path(require, rc, "read_file", None) is require


def test_fast_path_never_overrides_deny() -> None:
    rc = RunContext(allow_fs_writes=["*"])
    assert fast_path(Decision.DENY, rc, "write_file", "secrets/key") is Decision.DENY
