"""File tools as the model uses them, in a real temp workspace."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.tools.base import ToolError
from engine.tools.builtins.files import EditFile, ListFiles, ReadFile, WriteFile
from engine.tools.protocols import ToolContext
from engine.tools.workspace import Workspace


@pytest.fixture
def read(workspace: Workspace) -> ReadFile:
    return ReadFile(workspace, max_chars=1000)


@pytest.fixture
def write(workspace: Workspace) -> WriteFile:
    return WriteFile(workspace)


@pytest.fixture
def edit(workspace: Workspace) -> EditFile:
    return EditFile(workspace)


@pytest.fixture
def ls(workspace: Workspace) -> ListFiles:
    return ListFiles(workspace, max_entries=5)


# --- write_file and read_file ----------------------------------------------------------


async def test_write_then_read_round_trips(
    write: WriteFile, read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    result = await write.run({"path": "notes/deep/plan.md", "content": "héllo\n"}, ctx)

    assert result == "wrote 7 bytes to notes/deep/plan.md (created)"
    assert (workspace.root / "notes/deep/plan.md").read_text() == "héllo\n"
    assert await read.run({"path": "notes/deep/plan.md"}, ctx) == "héllo\n"


async def test_write_replaces_an_existing_file(
    write: WriteFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "a.txt").write_text("old")

    assert await write.run({"path": "a.txt", "content": "new"}, ctx) == (
        "wrote 3 bytes to a.txt (replaced)"
    )
    assert (workspace.root / "a.txt").read_text() == "new"


async def test_relative_paths_follow_the_working_directory(
    write: WriteFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "project").mkdir()
    in_project = dataclasses.replace(ctx, working_directory=workspace.root / "project")

    await write.run({"path": "README", "content": "x"}, in_project)

    assert (workspace.root / "project" / "README").exists()


async def test_write_onto_a_directory_is_refused(
    write: WriteFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "dir").mkdir()

    with pytest.raises(ToolError, match="write_file: 'dir' is a directory"):
        await write.run({"path": "dir", "content": "x"}, ctx)


async def test_write_outside_the_workspace_is_refused_and_writes_nothing(
    write: WriteFile, ctx: ToolContext, tmp_path: Path
) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        await write.run({"path": "../escaped.txt", "content": "x"}, ctx)

    assert not (tmp_path / "escaped.txt").exists()


async def test_write_through_a_symlinked_directory_pointing_out_is_refused(
    write: WriteFile, ctx: ToolContext, workspace: Workspace, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace.root / "out").symlink_to(outside)

    with pytest.raises(ToolError, match="a symlink leads to"):
        await write.run({"path": "out/x.txt", "content": "x"}, ctx)

    assert list(outside.iterdir()) == []


async def test_missing_argument_is_a_tool_error(write: WriteFile, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="write_file: missing required argument 'content'"):
        await write.run({"path": "a.txt"}, ctx)


async def test_read_missing_file(read: ReadFile, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=re.escape("read_file: no such file 'nope.txt'")):
        await read.run({"path": "nope.txt"}, ctx)


async def test_read_a_directory_points_to_list_files(
    read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "d").mkdir()

    with pytest.raises(ToolError, match="'d' is a directory; use list_files"):
        await read.run({"path": "d"}, ctx)


async def test_read_a_fifo_is_refused_instead_of_blocking(
    read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    os.mkfifo(workspace.root / "pipe")

    with pytest.raises(ToolError, match="'pipe' is not a regular file"):
        await read.run({"path": "pipe"}, ctx)


async def test_read_binary_is_refused(
    read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")

    with pytest.raises(ToolError, match=re.escape("'img.png' is not a UTF-8 text file")):
        await read.run({"path": "img.png"}, ctx)


async def test_read_undecodable_text_is_refused(
    read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "latin1.txt").write_bytes("café".encode("latin-1"))

    with pytest.raises(ToolError, match="not a UTF-8 text file"):
        await read.run({"path": "latin1.txt"}, ctx)


async def test_read_empty_file_says_so(
    read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "empty").touch()

    assert await read.run({"path": "empty"}, ctx) == "(empty file)"


async def test_read_large_file_keeps_both_ends_with_a_note(
    read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "big.log").write_text("START" + "x" * 3000 + "END")

    out = await read.run({"path": "big.log"}, ctx)

    assert out.startswith("START")
    assert out.endswith("END")
    assert "[... output truncated: 3008 chars total, showing first 500 and last 500 chars" in out


async def test_read_huge_file_reads_only_its_ends(
    read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    with (workspace.root / "huge.log").open("w") as f:
        f.write("FIRST LINE\n")
        f.write("é" * 5_000_000)  # 10 MB of two-byte characters
        f.write("\nLAST LINE")

    out = await read.run({"path": "huge.log"}, ctx)

    assert out.startswith("FIRST LINE\n")
    assert out.endswith("\nLAST LINE")
    assert "[... file truncated: 10000021 bytes total, showing the first 500 and last 500" in out
    assert "\ufffd" not in out
    assert len(out) < 1000 + 120


async def test_read_through_a_symlink_pointing_out_is_refused(
    read: ReadFile, ctx: ToolContext, workspace: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "passwd").write_text("root:x:0:0")
    (workspace.root / "passwd").symlink_to(tmp_path / "passwd")

    with pytest.raises(ToolError, match="outside the workspace"):
        await read.run({"path": "passwd"}, ctx)


async def test_read_from_secrets_is_refused(
    read: ReadFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "secrets").mkdir()
    (workspace.root / "secrets" / "token").write_text("hunter2")

    with pytest.raises(ToolError, match="secrets/ is never readable"):
        await read.run({"path": "secrets/token"}, ctx)


async def test_read_path_with_nul_byte_is_refused(read: ReadFile, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="NUL byte"):
        await read.run({"path": "a\0.txt"}, ctx)


# --- edit_file -------------------------------------------------------------------------


async def test_edit_replaces_the_single_occurrence(
    edit: EditFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "app.py").write_text("def f():\n    return 1\n")

    result = await edit.run(
        {"path": "app.py", "old": "    return 1\n", "new": "    x = 2\n    return x\n"}, ctx
    )

    assert result == "edited app.py: replaced 1 occurrence at line 2 (2 lines -> 3 lines)"
    assert (workspace.root / "app.py").read_text() == "def f():\n    x = 2\n    return x\n"


async def test_edit_with_no_match_says_not_found_and_changes_nothing(
    edit: EditFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "a.txt").write_text("alpha beta")

    with pytest.raises(ToolError, match=re.escape("edit_file: 'old' text not found in a.txt")):
        await edit.run({"path": "a.txt", "old": "gamma", "new": "delta"}, ctx)

    assert (workspace.root / "a.txt").read_text() == "alpha beta"


async def test_edit_with_two_matches_says_how_many_and_changes_nothing(
    edit: EditFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "a.txt").write_text("x = 1\ny = 1\n")

    with pytest.raises(
        ToolError, match=re.escape("'old' text occurs 2 times in a.txt; include more")
    ):
        await edit.run({"path": "a.txt", "old": "= 1", "new": "= 2"}, ctx)

    assert (workspace.root / "a.txt").read_text() == "x = 1\ny = 1\n"


async def test_edit_counts_overlapping_matches_as_ambiguous(
    edit: EditFile, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "a.txt").write_text("aaa")

    with pytest.raises(ToolError, match="occurs 2 times"):
        await edit.run({"path": "a.txt", "old": "aa", "new": "b"}, ctx)


async def test_edit_with_empty_old_is_refused(edit: EditFile, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="'old' is empty"):
        await edit.run({"path": "a.txt", "old": "", "new": "x"}, ctx)


async def test_edit_missing_file(edit: EditFile, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=re.escape("edit_file: no such file 'ghost.txt'")):
        await edit.run({"path": "ghost.txt", "old": "a", "new": "b"}, ctx)


# --- list_files ------------------------------------------------------------------------


async def test_list_sorts_and_marks_directories(
    ls: ListFiles, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "src").mkdir()
    (workspace.root / "b.txt").touch()
    (workspace.root / "a.txt").touch()
    (workspace.root / "secrets").mkdir()  # exists, but is never shown

    assert await ls.run({}, ctx) == "a.txt\nb.txt\nsrc/"
    assert await ls.run({"path": None}, ctx) == "a.txt\nb.txt\nsrc/"


async def test_list_a_subdirectory_and_an_empty_one(
    ls: ListFiles, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "src" / "pkg").mkdir(parents=True)
    (workspace.root / "src" / "main.py").touch()
    (workspace.root / "empty").mkdir()

    assert await ls.run({"path": "src"}, ctx) == "main.py\npkg/"
    assert await ls.run({"path": "empty"}, ctx) == "(empty directory)"


async def test_list_is_bounded_with_a_note(
    ls: ListFiles, ctx: ToolContext, workspace: Workspace
) -> None:
    for i in range(12):
        (workspace.root / f"f{i:02}").touch()

    out = (await ls.run({}, ctx)).splitlines()

    assert out[:5] == ["f00", "f01", "f02", "f03", "f04"]
    assert out[5] == "[... 12 entries in total, showing the first 5 ...]"


async def test_list_a_file_or_a_missing_path(
    ls: ListFiles, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "a.txt").touch()

    with pytest.raises(ToolError, match=re.escape("'a.txt' is a file; use read_file")):
        await ls.run({"path": "a.txt"}, ctx)
    with pytest.raises(ToolError, match="no such directory 'nope'"):
        await ls.run({"path": "nope"}, ctx)


async def test_list_outside_or_secrets_is_refused(
    ls: ListFiles, ctx: ToolContext, workspace: Workspace
) -> None:
    (workspace.root / "secrets").mkdir()

    with pytest.raises(ToolError, match="outside the workspace"):
        await ls.run({"path": ".."}, ctx)
    with pytest.raises(ToolError, match="secrets/ is never readable"):
        await ls.run({"path": "secrets"}, ctx)


# --- what is opened is what was checked -------------------------------------------------

SECRET = "sk-live-do-not-leak"


class SwappedAfterCheck(Workspace):
    """Another actor (a sub-agent's command, a job's run, an MCP server) swaps ``notes/``
    for a symlink into ``secrets/`` right after the path was checked."""

    def resolve(self, path: str, *, cwd: Path | None = None) -> Path:
        checked = super().resolve(path, cwd=cwd)
        os.rename(self.root / "notes", self.root / "notes.old")
        os.symlink(self.secrets, self.root / "notes")
        return checked


@pytest.fixture
def swapped(tmp_path: Path) -> SwappedAfterCheck:
    workspace = SwappedAfterCheck(tmp_path / "racing")
    workspace.secrets.mkdir()
    (workspace.secrets / "api.key").write_text(SECRET)
    (workspace.root / "notes").mkdir()
    (workspace.root / "notes" / "api.key").write_text("harmless")
    return workspace


ARGUMENTS = {
    ReadFile: {},
    WriteFile: {"content": "overwritten"},
    EditFile: {"old": SECRET, "new": "overwritten"},
}


@pytest.mark.parametrize("tool", [ReadFile, WriteFile, EditFile])
async def test_a_folder_swapped_for_a_symlink_after_the_check_leads_nowhere(
    swapped: SwappedAfterCheck, ctx: ToolContext, tool: type
) -> None:
    """The tools opened the checked path by name, following a symlink made after the
    check: read_file read secrets/api.key, write_file and edit_file overwrote it (found
    by review on 2026-12-06)."""
    args = {"path": "notes/api.key", **ARGUMENTS[tool]}
    with pytest.raises(ToolError, match="changed while it was opened"):
        await tool(swapped).run(args, dataclasses.replace(ctx, working_directory=swapped.root))
    assert (swapped.secrets / "api.key").read_text() == SECRET


async def test_a_new_file_in_a_folder_swapped_after_the_check_is_not_left_in_secrets(
    swapped: SwappedAfterCheck, ctx: ToolContext
) -> None:
    write = WriteFile(swapped)
    args = {"path": "notes/new.txt", "content": "planted"}
    with pytest.raises(ToolError, match="changed while it was opened"):
        await write.run(args, dataclasses.replace(ctx, working_directory=swapped.root))
    assert sorted(p.name for p in swapped.secrets.iterdir()) == ["api.key"]


@pytest.mark.parametrize("tool", [ReadFile, EditFile])
async def test_a_hard_link_to_a_secret_is_refused(
    workspace: Workspace, ctx: ToolContext, tool: type
) -> None:
    """A hard link is a second name for the file, which no path check sees: memory/
    (allowed unasked by the seeded rules) read secrets/api.key (found by review)."""
    workspace.secrets.mkdir()
    (workspace.secrets / "api.key").write_text(SECRET)
    (workspace.root / "memory").mkdir()
    os.link(workspace.secrets / "api.key", workspace.root / "memory" / "notes.txt")
    args = {"path": "memory/notes.txt", **ARGUMENTS[tool]}
    with pytest.raises(ToolError, match="a hard link"):
        await tool(workspace).run(args, ctx)
    assert (workspace.secrets / "api.key").read_text() == SECRET


async def test_a_hard_link_between_two_ordinary_files_is_read(
    workspace: Workspace, read: ReadFile, ctx: ToolContext
) -> None:
    (workspace.root / "a.txt").write_text("shared")
    os.link(workspace.root / "a.txt", workspace.root / "b.txt")
    assert await read.run({"path": "b.txt"}, ctx) == "shared"


async def test_a_new_file_takes_its_mode_from_the_umask(
    write: WriteFile, ctx: ToolContext, workspace: Workspace
) -> None:
    """0o644 was forced: a group-shared workspace (umask 002) lost its group write."""
    old = os.umask(0o002)
    try:
        await write.run({"path": "shared.txt", "content": "x"}, ctx)
    finally:
        os.umask(old)
    assert (workspace.root / "shared.txt").stat().st_mode & 0o777 == 0o664


#: One tool call in a process whose files may not grow past 1,000 bytes (a full disk, a
#: quota): what the call answered, or the error it raised.
_LIMITED_CALL = """
import asyncio, json, resource, signal, sys
from pathlib import Path
from engine.tools.base import ToolError
from engine.tools.builtins.files import EditFile, WriteFile
from engine.tools.protocols import ToolContext
from engine.tools.workspace import Workspace

root, name, args = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
workspace = Workspace(root)
tool = {"edit_file": EditFile, "write_file": WriteFile}[name](workspace)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
try:
    said = asyncio.run(tool.run(args, ToolContext(1, 1, "main", 0, root, None)))
except ToolError as exc:
    said = f"ToolError: {exc}"
print(said)
"""


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("edit_file", {"path": "plan.md", "old": "HEAD", "new": "B" * 300}),
        ("write_file", {"path": "plan.md", "content": "C" * 1100}),
    ],
)
def test_a_write_the_disk_cannot_take_leaves_the_file_as_it_was(
    tmp_path: Path, tool: str, args: dict[str, str]
) -> None:
    """Emptied in place first, a full disk left the file cut short, neither the old text
    nor the new, and edit_file's error came at the close, an internal error (found by
    review on 2026-12-06)."""
    original = "HEAD\n" + "A" * 900 + "\nTAIL\n"
    (tmp_path / "plan.md").write_text(original)
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED_CALL, str(tmp_path), tool, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
        timeout=60,
    )
    assert done.stdout.startswith(f"ToolError: {tool}: cannot write 'plan.md'"), done
    assert (tmp_path / "plan.md").read_text() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.md"]  # nothing left beside


async def test_a_written_file_stays_the_same_file(
    write: WriteFile, edit: EditFile, ctx: ToolContext, workspace: Workspace
) -> None:
    """Its mode, its owner and its other names: a file written beside it and renamed
    over it was another file (found by review of the change on 2026-12-06)."""
    script = workspace.root / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o750)
    os.link(script, workspace.root / "also.sh")
    inode = script.stat().st_ino
    await write.run({"path": "run.sh", "content": "echo new\n"}, ctx)
    await edit.run({"path": "run.sh", "old": "new", "new": "newer"}, ctx)
    assert (script.read_text(), script.stat().st_mode & 0o777) == ("echo newer\n", 0o750)
    assert script.stat().st_ino == inode
    assert (workspace.root / "also.sh").read_text() == "echo newer\n"
