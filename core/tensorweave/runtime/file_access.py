"""Which files the ops of a session may touch (docs/distributed.md, "Security").

A local session's ops may read and write any file its process can: the program is the user's
own. A worker runs graphs that remote clients sent, so its ops (ReadFile, WriteFile,
MatchingFiles, the checkpoint ops, the readers and the file datasets) may only use files under
the directories its cluster config allows (``[files] allow``; by default the working directory
the task was started in). Everything else is ``PermissionDeniedError`` — a client cannot read
``/etc/shadow`` or overwrite a worker's code through a ``WriteFile`` node.

``FileAccess`` is the one place that decides. Kernels take it from their session's resources
(``of(resources)``) and call ``check`` with each path before opening it. Paths are compared
after resolving ``..`` and symbolic links (``os.path.realpath``), so a link inside an allowed
directory that points outside it does not let a client out. What this does not cover: a link
swapped in between the check and the open by someone who can already write the allowed
directory (the worker's own user).
"""

from __future__ import annotations

import glob
import os

from tensorweave.framework import errors

__all__ = ["FileAccess", "UNRESTRICTED", "of"]


class FileAccess:
    """Files under ``allow`` (directories; None: every file) may be read and written."""

    def __init__(self, allow=None):
        if allow is None:
            self.roots = None
        else:
            # realpath: the directories as the kernel's resolved paths will spell them.
            self.roots = tuple(sorted({os.path.realpath(os.fspath(d)) for d in allow}))

    @classmethod
    def working_directory(cls) -> FileAccess:
        """Files under this process's current directory: a worker's default."""
        return cls([os.getcwd()])

    @property
    def unrestricted(self) -> bool:
        return self.roots is None

    def allows(self, path) -> bool:
        if self.roots is None:
            return True
        real = os.path.realpath(os.fsdecode(path))
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)

    def check(self, path, what: str, *, write: bool = False) -> str:
        """``path`` (a str) if it may be used, else PermissionDeniedError naming ``what`` (the
        op or dataset) and the path. The allowed directories are not named: the message goes
        back to a remote client."""
        path = os.fsdecode(path)
        if not self.allows(path):
            raise errors.PermissionDeniedError(
                f"{what}: {'writing' if write else 'reading'} {path!r} is not allowed: it is outside the "
                "directories this task lets clients use (the [files] allow list of its cluster config; "
                "by default the directory the task was started in)")
        return path

    def glob(self, pattern, what: str) -> list[str]:
        """The matches of a glob ``pattern`` that may be used. A pattern whose fixed part
        (before the first wildcard) lies outside every allowed directory is refused as a
        whole, so a client cannot list other directories; matches that resolve outside (links)
        are left out."""
        pattern = os.fsdecode(pattern)
        if self.roots is not None:
            fixed = pattern
            for i, c in enumerate(pattern):
                if c in "*?[":
                    fixed = os.path.dirname(pattern[:i]) or "."
                    break
            self.check(fixed, what)
        return [m for m in glob.glob(pattern) if self.allows(m)]

    def __repr__(self) -> str:
        return "FileAccess(unrestricted)" if self.roots is None else f"FileAccess(allow={list(self.roots)})"


UNRESTRICTED = FileAccess(None)


def of(resources) -> FileAccess:
    """The policy of a session's resources (``SessionResources.file_access``)."""
    return getattr(resources, "file_access", None) or UNRESTRICTED
