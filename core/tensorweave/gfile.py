"""``tw.gfile``: TF1's file API (``tf.gfile``) on local paths.

``GFile``/``Open``/``FastGFile`` open a file as TF1 does: lazily (the file is opened at the
first read or write, so a missing file is reported then), reading ``str`` in text modes and
``bytes`` in binary modes, and accepting ``str`` or ``bytes`` when writing. The functions
(``Exists``, ``MakeDirs``, ``Glob``, ``Remove``, ``DeleteRecursively``, ``Copy``, ``Rename``,
``Stat``, ``Walk``, ...) keep TF1's names and semantics; the lower-case names of TF 1.13+'s
``tf.io.gfile`` are aliases.

Failures raise the ``tw.errors`` class TF raises: a missing path ``NotFoundError``, an existing
destination ``AlreadyExistsError``, no permission ``PermissionDeniedError``, a directory where a
file was expected (or the reverse) ``FailedPreconditionError``, a bad mode
``InvalidArgumentError``. Remote filesystems (``gs://``, ``hdfs://``) are not supported:
such a path is an ``UnimplementedError``.
"""

from __future__ import annotations

import errno
import glob as _glob
import os
import re
import shutil

from tensorweave.framework import errors

__all__ = [
    "GFile", "Open", "FastGFile", "Exists", "MakeDirs", "MkDir", "Glob", "Remove", "DeleteRecursively",
    "IsDirectory", "ListDirectory", "Copy", "Rename", "Stat", "Walk", "FileStatistics",
    "exists", "makedirs", "mkdir", "glob", "remove", "rmtree", "isdir", "listdir", "copy", "rename", "stat", "walk",
]

_REMOTE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_MODES = ("r", "rb", "w", "wb", "a", "ab", "r+", "rb+", "w+", "wb+", "a+", "ab+")


def _path(p, what="path"):
    if isinstance(p, bytes):
        p = p.decode("utf-8")
    p = os.fspath(p) if hasattr(p, "__fspath__") else p
    if not isinstance(p, str):
        raise errors.InvalidArgumentError(f"tw.gfile: {what} must be a string or path, got {p!r}")
    if _REMOTE.match(p) and not p.startswith("file://"):
        raise errors.UnimplementedError(
            f"tw.gfile: {p!r}: only local paths are supported (no filesystem is registered for "
            f"{p.split('://')[0]}://)")
    return p[len("file://"):] if p.startswith("file://") else p


def _os_error(e: OSError, path, action):
    """The ``tw.errors`` class TF uses for this OS error, naming the path and action."""
    msg = f"{path}: {action}: {e.strerror or e}"
    if isinstance(e, FileNotFoundError) or e.errno == errno.ENOENT:
        return errors.NotFoundError(msg)
    if isinstance(e, FileExistsError) or e.errno == errno.EEXIST:
        return errors.AlreadyExistsError(msg)
    if isinstance(e, PermissionError) or e.errno in (errno.EACCES, errno.EPERM):
        return errors.PermissionDeniedError(msg)
    if isinstance(e, IsADirectoryError | NotADirectoryError) or e.errno in (errno.ENOTEMPTY,):
        return errors.FailedPreconditionError(msg)
    if e.errno == errno.ENOSPC:
        return errors.ResourceExhaustedError(msg)
    return errors.UnknownError(msg)


class GFile:
    """A file opened the TF1 way: ``GFile(name, mode="r")``, usable as a context manager
    and an iterator of lines. Modes: ``r``, ``rb``, ``w``, ``wb``, ``a``, ``ab`` (and
    their ``+`` forms)."""

    def __init__(self, name, mode="r"):
        if mode not in _MODES:
            raise errors.InvalidArgumentError(
                f"tw.gfile.GFile({name!r}): mode must be one of {list(_MODES)}, got {mode!r}")
        self._name = _path(name, "name")
        self._mode = mode
        self._binary = "b" in mode
        self._file = None
        self._closed = False

    name = property(lambda self: self._name)
    mode = property(lambda self: self._mode)

    def _open(self):
        if self._closed:
            raise errors.FailedPreconditionError(f"{self._name}: the file is closed")
        if self._file is None:
            raw_mode = self._mode.replace("b", "") + "b"  # bytes underneath; text is decoded here
            try:
                self._file = open(self._name, raw_mode)  # closed by close()
            except OSError as e:
                raise _os_error(e, self._name, "open") from None
        return self._file

    def _check(self, reading):
        if reading and not ("r" in self._mode or "+" in self._mode):
            raise errors.PermissionDeniedError(f"{self._name}: the file isn't open for reading (mode {self._mode!r})")
        if not reading and self._mode in ("r", "rb"):
            raise errors.PermissionDeniedError(f"{self._name}: the file isn't open for writing (mode {self._mode!r})")
        return self._open()

    def _out(self, data: bytes):
        return data if self._binary else data.decode("utf-8")

    def read(self, n=-1):
        """Read ``n`` bytes (all with -1): ``bytes`` in a binary mode, ``str`` otherwise."""
        f = self._check(True)
        return self._out(f.read(-1 if n is None else n))

    def readline(self):
        return self._out(self._check(True).readline())

    def readlines(self):
        return [self._out(line) for line in self._check(True).readlines()]

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    next = __next__

    def write(self, file_content):
        """Write ``str`` (as UTF-8) or ``bytes``, whatever the mode, as TF1 does."""
        f = self._check(False)
        if isinstance(file_content, str):
            file_content = file_content.encode("utf-8")
        elif not isinstance(file_content, bytes | bytearray | memoryview):
            raise errors.InvalidArgumentError(
                f"{self._name}: write expects str or bytes, got {type(file_content).__name__}")
        try:
            f.write(file_content)
        except OSError as e:
            raise _os_error(e, self._name, "write") from None

    def tell(self):
        return self._open().tell()

    def seek(self, offset=None, whence=0, position=None):
        """Move to ``offset`` (``position`` is TF1's older name for it)."""
        if position is not None:
            offset = position
        self._open().seek(0 if offset is None else offset, whence)

    def size(self):
        """The file's size in bytes."""
        if self._file is not None:
            self._file.flush()
        return Stat(self._name).length

    def flush(self):
        if self._file is not None:
            self._file.flush()

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None
        self._closed = True

    def seekable(self):
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<tw.gfile.GFile {self._name!r} mode={self._mode!r}>"


Open = GFile


class FastGFile(GFile):
    """TF1's deprecated name for ``GFile``."""

    def __init__(self, name, mode="r"):
        super().__init__(name, mode)


class FileStatistics:
    """``length`` (bytes), ``mtime_nsec`` and ``is_directory`` of a path."""

    def __init__(self, length=None, mtime_nsec=None, is_directory=None):
        self.length, self.mtime_nsec, self.is_directory = length, mtime_nsec, is_directory

    def __repr__(self):
        return f"FileStatistics(length={self.length}, mtime_nsec={self.mtime_nsec}, is_directory={self.is_directory})"


def Exists(filename):  # noqa: N802 - TF1 names
    """Whether a file or directory exists at ``filename``."""
    return os.path.exists(_path(filename, "filename"))


def IsDirectory(dirname):  # noqa: N802
    """Whether ``dirname`` is a directory (False when it does not exist)."""
    return os.path.isdir(_path(dirname, "dirname"))


def MakeDirs(dirname):  # noqa: N802
    """Create ``dirname`` and missing parents; an existing directory is fine."""
    p = _path(dirname, "dirname")
    if os.path.exists(p) and not os.path.isdir(p):
        raise errors.FailedPreconditionError(f"{p}: MakeDirs: exists and is not a directory")
    try:
        os.makedirs(p, exist_ok=True)
    except OSError as e:
        raise _os_error(e, p, "MakeDirs") from None


def MkDir(dirname):  # noqa: N802
    """Create one directory: its parent must exist and it must not."""
    p = _path(dirname, "dirname")
    try:
        os.mkdir(p)
    except OSError as e:
        raise _os_error(e, p, "MkDir") from None


def Glob(filename):  # noqa: N802
    """Paths matching the pattern(s) ``filename`` (``*``, ``?``, ``[...]``), sorted."""
    patterns = [filename] if isinstance(filename, str | bytes | os.PathLike) else list(filename)
    out = []
    for pat in patterns:
        out.extend(_glob.glob(_path(pat, "pattern")))
    return sorted(set(out))


def Remove(filename):  # noqa: N802
    """Delete the file ``filename``."""
    p = _path(filename, "filename")
    if os.path.isdir(p):
        raise errors.FailedPreconditionError(f"{p}: Remove: is a directory (use DeleteRecursively)")
    try:
        os.remove(p)
    except OSError as e:
        raise _os_error(e, p, "Remove") from None


def DeleteRecursively(dirname):  # noqa: N802
    """Delete ``dirname`` with everything in it (a plain file is deleted too)."""
    p = _path(dirname, "dirname")
    try:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
    except OSError as e:
        raise _os_error(e, getattr(e, "filename", None) or p, "DeleteRecursively") from None


def ListDirectory(dirname):  # noqa: N802
    """The names (not paths) of the entries of ``dirname``, sorted."""
    p = _path(dirname, "dirname")
    if not os.path.exists(p):
        raise errors.NotFoundError(f"{p}: ListDirectory: the directory does not exist")
    try:
        return sorted(os.listdir(p))
    except OSError as e:
        raise _os_error(e, p, "ListDirectory") from None


def _check_destination(src, dst, overwrite, action):
    if not os.path.exists(src):
        raise errors.NotFoundError(f"{src}: {action}: the source does not exist")
    if os.path.exists(dst):
        if not overwrite:
            raise errors.AlreadyExistsError(f"{dst}: {action}: the destination exists (pass overwrite=True)")
        if os.path.isdir(dst) and not os.path.isdir(src):
            raise errors.FailedPreconditionError(f"{dst}: {action}: the destination is a directory")


def Copy(oldpath, newpath, overwrite=False):  # noqa: N802
    """Copy the file ``oldpath`` to ``newpath``; an existing ``newpath`` is an
    ``AlreadyExistsError`` unless ``overwrite``."""
    src, dst = _path(oldpath, "oldpath"), _path(newpath, "newpath")
    _check_destination(src, dst, overwrite, "Copy")
    if os.path.isdir(src):
        raise errors.FailedPreconditionError(f"{src}: Copy: the source is a directory")
    try:
        shutil.copyfile(src, dst)
    except OSError as e:
        raise _os_error(e, dst, "Copy") from None


def Rename(oldname, newname, overwrite=False):  # noqa: N802
    """Move ``oldname`` to ``newname``; an existing ``newname`` is an
    ``AlreadyExistsError`` unless ``overwrite``."""
    src, dst = _path(oldname, "oldname"), _path(newname, "newname")
    _check_destination(src, dst, overwrite, "Rename")
    try:
        os.replace(src, dst)
    except OSError as e:
        raise _os_error(e, dst, "Rename") from None


def Stat(filename):  # noqa: N802
    """``FileStatistics`` of ``filename``."""
    p = _path(filename, "filename")
    try:
        st = os.stat(p)
    except OSError as e:
        raise _os_error(e, p, "Stat") from None
    return FileStatistics(length=st.st_size, mtime_nsec=st.st_mtime_ns, is_directory=os.path.isdir(p))


def Walk(top, in_order=True):  # noqa: N802
    """``(dirname, subdirectory names, file names)`` for ``top`` and every directory below
    it; parents before children when ``in_order`` (else children first). Nothing for a
    missing ``top``."""
    p = _path(top, "top")
    for dirpath, dirnames, filenames in os.walk(p, topdown=in_order):
        dirnames.sort()
        yield dirpath, list(dirnames), sorted(filenames)


# TF 1.13+ (tf.io.gfile) spellings.
exists, makedirs, mkdir, glob, remove, rmtree = Exists, MakeDirs, MkDir, Glob, Remove, DeleteRecursively
isdir, listdir, copy, rename, stat, walk = IsDirectory, ListDirectory, Copy, Rename, Stat, Walk
