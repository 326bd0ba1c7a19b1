"""File tools: read_file, write_file, edit_file, list_files.

Every path goes through ``Workspace.resolve`` (relative paths are taken from the
agent's working directory) and the tools then touch only the canonical path, opened as
it was checked (``Workspace.open``). Blocking
file I/O runs in a worker thread so a slow disk never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path
from typing import Any

from engine.tools.base import ToolError
from engine.tools.builtins._common import BuiltinTool, object_schema
from engine.tools.output import decode_head, decode_tail, truncate_output
from engine.tools.protocols import ToolCategory, ToolContext
from engine.tools.workspace import SECRETS_DIR, Workspace

__all__ = ["EditFile", "ListFiles", "ReadFile", "WriteFile"]

#: Files larger than this are refused by edit_file, which must hold them whole.
MAX_EDIT_BYTES = 10 * 1024 * 1024
#: A NUL byte in this many leading bytes marks a file as binary.
_BINARY_SNIFF_BYTES = 8192
#: A UTF-8 character is at most this many bytes; used to size byte reads for a char limit.
_MAX_UTF8_BYTES = 4


def _path_property(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _os_error(tool: str, action: str, rel: str, exc: OSError) -> ToolError:
    reason = exc.strerror or exc.__class__.__name__
    return ToolError(f"{tool}: cannot {action} '{rel}': {reason}")


def _regular_file(tool: str, path: Path, rel: str) -> os.stat_result:
    """Stat ``path`` and insist on a regular file (a FIFO would block a read forever)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ToolError(f"{tool}: no such file '{rel}'") from None
    except OSError as exc:
        raise _os_error(tool, "open", rel, exc) from None
    return _regular(tool, st, rel)


def _regular(tool: str, st: os.stat_result, rel: str) -> os.stat_result:
    if stat.S_ISDIR(st.st_mode):
        raise _a_directory(tool, rel)
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{tool}: '{rel}' is not a regular file")
    return st


def _a_directory(tool: str, rel: str) -> ToolError:
    return ToolError(f"{tool}: '{rel}' is a directory; use list_files to see what is in it")


#: Never blocks on a FIFO put where a file was (ENXIO for a writer with no reader).
_OPEN_FLAGS = os.O_NONBLOCK


def _write_whole(fd: int, data: bytes) -> None:
    """``data`` as the whole content of the open file ``fd``, its space reserved before a
    byte of the old content goes: a full disk, a quota or a size limit leaves the file as
    it was (it was emptied first and left cut short until 2026-12-06). Written in place,
    the file stays the same file: its owner, its links, its attributes."""
    if data:
        try:
            os.posix_fallocate(fd, 0, len(data))
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], written)
    os.ftruncate(fd, len(data))


def _open_regular(
    workspace: Workspace, tool: str, path: Path, rel: str, flags: int
) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file ``path`` as it was checked (``Workspace.open``);
    what it is comes from the descriptor, not from another look at the path."""
    try:
        fd = workspace.open(path, flags | _OPEN_FLAGS)
    except FileNotFoundError:
        raise ToolError(f"{tool}: no such file '{rel}'") from None
    except IsADirectoryError:  # opened for writing (edit_file)
        raise _a_directory(tool, rel) from None
    except OSError as exc:
        raise _os_error(tool, "open", rel, exc) from None
    try:
        return fd, _regular(tool, os.fstat(fd), rel)
    except BaseException:
        os.close(fd)
        raise


def _not_text(tool: str, rel: str, size: int) -> ToolError:
    return ToolError(f"{tool}: '{rel}' is not a UTF-8 text file ({size} bytes); it looks binary")


def _decode_whole(tool: str, rel: str, data: bytes) -> str:
    if b"\0" in data[:_BINARY_SNIFF_BYTES]:
        raise _not_text(tool, rel, len(data))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _not_text(tool, rel, len(data)) from None


class ReadFile(BuiltinTool):
    """``read_file{path}``: a text file's content, head and tail kept if it is large."""

    name = "read_file"
    rerun_safe = True  # read-only
    description = (
        "Read a UTF-8 text file from the workspace and return its content. Relative paths "
        "are taken from the working directory. A large file is cut in the middle with a "
        "note; use execute_cmd (e.g. sed -n '100,200p' FILE) to read a part of it. "
        "Binary files are refused."
    )
    category = ToolCategory.FILESYSTEM

    def __init__(self, workspace: Workspace, *, max_chars: int = 40_000) -> None:
        self.workspace = workspace
        self.max_chars = max_chars
        self.parameters = object_schema(
            {"path": _path_property("File to read, relative to the working directory.")},
            ["path"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        path = self.workspace.resolve(args["path"], cwd=ctx.working_directory)
        return await asyncio.to_thread(self._read, path, self.workspace.relative(path))

    def _read(self, path: Path, rel: str) -> str:
        fd, st = _open_regular(self.workspace, self.name, path, rel, os.O_RDONLY)
        size = st.st_size
        limit = self.max_chars
        head_chars = limit // 2
        tail_chars = limit - head_chars
        try:
            with os.fdopen(fd, "rb") as f:
                if size <= limit * _MAX_UTF8_BYTES:
                    text = _decode_whole(self.name, rel, f.read())
                    if not text:
                        return "(empty file)"
                    return truncate_output(text, limit)
                # Too big to need whole: read just the two ends, memory stays bounded.
                head = f.read(head_chars * _MAX_UTF8_BYTES)
                f.seek(size - tail_chars * _MAX_UTF8_BYTES)
                tail = f.read()
        except OSError as exc:
            raise _os_error(self.name, "read", rel, exc) from None
        if b"\0" in head[:_BINARY_SNIFF_BYTES]:
            raise _not_text(self.name, rel, size)
        try:
            head_text = decode_head(head, errors="strict")[:head_chars]
            tail_text = decode_tail(tail, errors="strict")[-tail_chars:] if tail_chars else ""
        except UnicodeDecodeError:
            raise _not_text(self.name, rel, size) from None
        note = (
            f"[... file truncated: {size} bytes total, showing the first {len(head_text)} "
            f"and last {len(tail_text)} chars ...]"
        )
        return f"{head_text}\n{note}\n{tail_text}"


class WriteFile(BuiltinTool):
    """``write_file{path, content}``: create or replace a file, creating parent directories."""

    name = "write_file"
    rerun_safe = True  # idempotent: the same content again
    description = (
        "Write a text file in the workspace, replacing it if it exists. Parent directories "
        "are created. To change part of an existing file prefer edit_file."
    )
    category = ToolCategory.FILESYSTEM

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.parameters = object_schema(
            {
                "path": _path_property("File to write, relative to the working directory."),
                "content": {"type": "string", "description": "The complete new content."},
            },
            ["path", "content"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        path = self.workspace.resolve(args["path"], cwd=ctx.working_directory)
        return await asyncio.to_thread(
            self._write, path, self.workspace.relative(path), args["content"]
        )

    def _write(self, path: Path, rel: str, content: str) -> str:
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolError(f"{self.name}: content is not valid Unicode: {exc.reason}") from None
        if path.is_dir():
            raise ToolError(f"{self.name}: '{rel}' is a directory")
        existed = path.exists()
        if existed:
            _regular_file(self.name, path, rel)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = self.workspace.open(path, os.O_WRONLY | os.O_CREAT | _OPEN_FLAGS)
        except OSError as exc:
            raise _os_error(self.name, "write", rel, exc) from None
        try:
            # Written only once it is known to be the file checked (``Workspace.open``).
            _regular(self.name, os.fstat(fd), rel)
            _write_whole(fd, data)
        except OSError as exc:
            raise _os_error(self.name, "write", rel, exc) from None
        finally:
            os.close(fd)
        what = "replaced" if existed else "created"
        return f"wrote {len(data)} bytes to {rel} ({what})"


class EditFile(BuiltinTool):
    """``edit_file{path, old, new}``: replace the one occurrence of ``old`` with ``new``."""

    name = "edit_file"
    description = (
        "Replace a piece of text in a file. 'old' must occur exactly once in the file, "
        "matching exactly (whitespace and indentation included); include enough "
        "surrounding lines to make it unique. Use instead of sed or awk."
    )
    category = ToolCategory.FILESYSTEM

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.parameters = object_schema(
            {
                "path": _path_property("File to edit, relative to the working directory."),
                "old": {
                    "type": "string",
                    "description": "Exact text to replace; must occur exactly once.",
                },
                "new": {"type": "string", "description": "Replacement text (may be empty)."},
            },
            ["path", "old", "new"],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        old, new = args["old"], args["new"]
        if not old:
            raise ToolError(f"{self.name}: 'old' is empty; give the exact text to replace")
        if old == new:
            raise ToolError(f"{self.name}: 'old' and 'new' are identical; nothing to change")
        path = self.workspace.resolve(args["path"], cwd=ctx.working_directory)
        return await asyncio.to_thread(self._edit, path, self.workspace.relative(path), old, new)

    def _edit(self, path: Path, rel: str, old: str, new: str) -> str:
        fd, st = _open_regular(self.workspace, self.name, path, rel, os.O_RDWR)
        with os.fdopen(fd, "r+b") as f:
            if st.st_size > MAX_EDIT_BYTES:
                raise ToolError(f"{self.name}: '{rel}' is too large to edit ({st.st_size} bytes)")
            try:
                text = _decode_whole(self.name, rel, f.read())
            except OSError as exc:
                raise _os_error(self.name, "read", rel, exc) from None
            updated, first = self._edited(text, rel, old, new)
            try:
                _write_whole(f.fileno(), updated.encode("utf-8"))
            except UnicodeEncodeError as exc:
                raise ToolError(
                    f"{self.name}: 'new' is not valid Unicode text: {exc.reason}"
                ) from None
            except OSError as exc:
                raise _os_error(self.name, "write", rel, exc) from None
        line = text.count("\n", 0, first) + 1
        return (
            f"edited {rel}: replaced 1 occurrence at line {line} "
            f"({old.count(chr(10)) + 1} lines -> {new.count(chr(10)) + 1} lines)"
        )

    def _edited(self, text: str, rel: str, old: str, new: str) -> tuple[str, int]:
        """``text`` with ``old`` replaced once, and where it was."""
        first = text.find(old)
        if first < 0:
            raise ToolError(
                f"{self.name}: 'old' text not found in {rel}; it must match exactly, "
                "whitespace included (read_file shows the current content)"
            )
        # Searching again from first + 1 also catches overlapping matches.
        if text.find(old, first + 1) >= 0:
            count = max(text.count(old), 2)
            raise ToolError(
                f"{self.name}: 'old' text occurs {count} times in {rel}; include more "
                "surrounding lines so it matches exactly once"
            )
        return text[:first] + new + text[first + len(old) :], first


class ListFiles(BuiltinTool):
    """``list_files{path?}``: one directory's entries, sorted, directories marked with ``/``."""

    name = "list_files"
    rerun_safe = True  # read-only
    description = (
        "List the entries of a directory in the workspace (not recursive), sorted by name; "
        "directories end with '/'. Without a path, lists the working directory."
    )
    category = ToolCategory.FILESYSTEM

    def __init__(self, workspace: Workspace, *, max_entries: int = 500) -> None:
        self.workspace = workspace
        self.max_entries = max_entries
        self.parameters = object_schema(
            {
                "path": _path_property(
                    "Directory to list, relative to the working directory (default: '.')."
                )
            },
            [],
        )

    async def _run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        path = self.workspace.resolve(args.get("path") or ".", cwd=ctx.working_directory)
        return await asyncio.to_thread(self._list, path, self.workspace.relative(path))

    def _list(self, path: Path, rel: str) -> str:
        try:
            with os.scandir(path) as it:
                entries = [self._entry(entry, path) for entry in it]
        except FileNotFoundError:
            raise ToolError(f"{self.name}: no such directory '{rel}'") from None
        except NotADirectoryError:
            raise ToolError(f"{self.name}: '{rel}' is a file; use read_file") from None
        except OSError as exc:
            raise _os_error(self.name, "list", rel, exc) from None
        names = sorted(name for name in entries if name is not None)
        if not names:
            return "(empty directory)"
        shown = names[: self.max_entries]
        if len(names) > len(shown):
            shown.append(f"[... {len(names)} entries in total, showing the first {len(shown)} ...]")
        return "\n".join(shown)

    def _entry(self, entry: os.DirEntry[str], parent: Path) -> str | None:
        # secrets/ is unreadable anyway; not listing it keeps it out of the model's plans.
        if parent == self.workspace.root and entry.name == SECRETS_DIR:
            return None
        try:
            is_dir = entry.is_dir()  # follows symlinks: a link to a directory reads as one
        except OSError:
            is_dir = False
        return entry.name + "/" if is_dir else entry.name
