"""The workspace: the one directory tree file and shell tools may touch."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from engine.config import ConfigError
from engine.tools.base import ToolError

__all__ = ["SECRETS_DIR", "Workspace"]

#: Top-level workspace directory no tool may read, list or write.
SECRETS_DIR = "secrets"


class Workspace:
    """Confines paths to ``root`` (``CHATHUB_WORKSPACE``).

    Paths are canonicalized the way the kernel will see them (``os.path.realpath``:
    ``..`` and every symlink, including symlinked parents, are resolved), then checked
    against the canonical root. A symlink pointing out is therefore refused, whatever
    its name inside the workspace. The check is made when a tool resolves its path;
    the tools then open the canonical path (``open``), never the name the model gave,
    and hold what they opened to what was checked.
    """

    def __init__(self, root: Path) -> None:
        root = Path(root).expanduser()
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file there, no permission: a traceback until 2026-12-07
            raise ConfigError(
                f"CHATHUB_WORKSPACE: {root} is not a directory that can be made "
                f"({exc.strerror or exc}); set it to a directory"
            ) from None
        # Resolved once: every later comparison is against the canonical root.
        self.root = Path(os.path.realpath(root))
        self.secrets = self.root / SECRETS_DIR

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def contains(self, path: Path) -> bool:
        """Whether canonical ``path`` is the root or lies beneath it."""
        return path == self.root or path.is_relative_to(self.root)

    def resolve(self, path: str, *, cwd: Path | None = None) -> Path:
        """Canonicalize ``path`` (relative to ``cwd``, default the root) inside the workspace.

        Raises ``ToolError`` for an empty path, a NUL byte or a lone surrogate (the model's
        JSON may carry one; it made the path's resolution raise and jammed the turn),
        anything that resolves outside the root and anything under ``<root>/secrets``.
        """
        if not isinstance(path, str):
            raise ToolError(f"path must be a string, got {type(path).__name__}")
        if not path.strip():
            raise ToolError("path is empty")
        if "\0" in path:
            raise ToolError(f"path {path!r} contains a NUL byte")
        try:
            os.fsencode(path)
        except UnicodeEncodeError:  # a lone surrogate: no file can have that name
            raise ToolError(f"path {path!r} is not a name a file can have") from None
        base = self.root if cwd is None else Path(os.path.realpath(cwd))
        if not self.contains(base):
            raise ToolError(f"working directory {base} is outside the workspace {self.root}")
        joined = os.path.join(base, path)
        resolved = Path(os.path.realpath(joined))
        if not self.contains(resolved):
            lexical = Path(os.path.normpath(joined))
            if self.contains(lexical):
                # Inside by name, outside by target: say so, or the refusal looks wrong.
                raise ToolError(
                    f"path {path!r} is outside the workspace {self.root} "
                    f"(a symlink leads to {resolved})"
                )
            raise ToolError(f"path {path!r} is outside the workspace {self.root}")
        if self._in_secrets(resolved):
            raise ToolError(f"path {path!r} is in secrets/: secrets/ is never readable")
        return resolved

    def open(self, path: Path, flags: int) -> int:
        """A descriptor of ``path`` (canonical, from ``resolve``) that is what was checked.

        A folder swapped for a symlink between the check and the open led the file tools
        into ``secrets/``, and a hard link is a second name for a file there that no path
        check sees (both found by review on 2026-12-06). So the last part is never
        followed (``O_NOFOLLOW``), the file opened is held to the path checked (Linux
        names it in ``/proc/self/fd``), and a file with more than one name is refused when
        one of them is in ``secrets/``. ``OSError`` as ``os.open`` raises it."""
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        created = False
        if flags & os.O_CREAT:
            try:  # made here: taken away again if it is not where it was checked
                fd, created = os.open(path, flags | os.O_EXCL, 0o666), True  # the umask applies
            except FileExistsError:
                fd = os.open(path, flags & ~os.O_CREAT)
        else:
            fd = os.open(path, flags)
        try:
            opened = _name_of(fd)
            if opened is not None and opened != path:
                if created:
                    with contextlib.suppress(OSError):
                        os.unlink(opened)
                raise ToolError(
                    f"'{self.relative(path)}' changed while it was opened (it leads to "
                    f"{opened} now); nothing was read or written"
                )
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and self._a_secret(st):
                raise ToolError(
                    f"'{self.relative(path)}' is another name (a hard link) for a file in "
                    "secrets/: secrets/ is never readable"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _a_secret(self, st: os.stat_result) -> bool:
        """Whether the file ``st`` describes is one of the files under ``secrets/``."""
        for folder, _dirs, files in os.walk(self.secrets):
            for name in files:
                try:
                    other = os.lstat(os.path.join(folder, name))
                except OSError:
                    continue
                if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                    return True
        return False

    def _in_secrets(self, resolved: Path) -> bool:
        """Whether canonical ``resolved`` is ``secrets/`` or beneath it, under any spelling
        a file system may take for it: ``realpath`` keeps the case it was given, and on a
        case-insensitive one (macOS, Windows, a casefolded Linux directory) ``Secrets/key``
        is ``secrets/key`` (until 2026-12-06 it was let through); and the folder a
        ``secrets`` symlink leads to (until 2026-12-07 its files were readable through
        the link itself when it led deeper into the workspace: only the path's first
        part was compared; found by review)."""
        if resolved == self.root:
            return False
        kept = Path(os.path.realpath(self.secrets))  # a symlink to a folder deeper inside
        if kept != self.secrets and resolved.is_relative_to(kept):
            return True
        top = resolved.relative_to(self.root).parts[0]
        if top.casefold() == SECRETS_DIR:  # also "SECRETS", "ſecrets": refused on any
            return True
        try:  # another name for the same directory (a normalizing file system)
            return os.path.samefile(self.root / top, self.secrets)
        except OSError:  # one of them does not exist: not the same directory
            return False

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, for messages (``.`` for the root itself)."""
        try:
            rel = Path(path).relative_to(self.root)
        except ValueError:
            return str(path)
        return rel.as_posix() or "."


def _name_of(fd: int) -> Path | None:
    """The path the kernel gives an open descriptor (``None`` where it gives none)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None
