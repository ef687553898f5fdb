"""``tw.logging``: TF1's ``tf.logging`` on the standard library's ``logging``.

Messages go to the logger named ``"tensorweave"`` (TF1's is ``"tensorflow"``), the parent of
the loggers the rest of tensorweave writes to (``tensorweave.plugins``, ...). Levels are the
standard ones: ``DEBUG``, ``INFO``, ``WARN``, ``ERROR``, ``FATAL``.

Visibility follows TF1. tensorweave as a library prints nothing by itself (its package
attaches only a ``NullHandler``). The first call of a function here attaches a handler that
writes ``LEVEL:tensorweave:message`` lines to stderr, unless the application configured
logging itself: the handler stays silent while the root logger or the ``"tensorweave"``
logger has another handler (it checks when each record comes, so a ``logging.basicConfig()``
made later wins, without duplicate lines). The default threshold is the root logger's
(``WARNING``), so ``tw.logging.info`` shows only after ``tw.logging.set_verbosity(tw.logging.INFO)``,
as in TF1.

``log_every_n``/``log_first_n`` count per call site (file and line), as TF1 does. ``fatal``
logs at ``FATAL`` and returns (it does not abort the program, like TF1's Python function).
Records are attributed to the caller's file and line, not to this module.
"""

from __future__ import annotations

import logging as _logging
import sys as _sys
import threading as _threading

__all__ = [
    "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "log", "debug", "info", "warn", "warning", "error", "fatal",
    "vlog", "log_if", "log_every_n", "log_first_n", "set_verbosity", "get_verbosity", "flush",
    "TaskLevelStatusMessage", "get_logger",
]

DEBUG = _logging.DEBUG
INFO = _logging.INFO
WARN = _logging.WARN
ERROR = _logging.ERROR
FATAL = _logging.FATAL

_LOGGER_NAME = "tensorweave"
_lock = _threading.Lock()
_handler = None
_counts: dict = {}


class _FallbackStderrHandler(_logging.StreamHandler):
    """Writes to the current ``sys.stderr`` only while nobody else handles our records."""

    def __init__(self):
        super().__init__()
        self.setFormatter(_logging.Formatter(_logging.BASIC_FORMAT))

    @property
    def stream(self):
        return _sys.stderr

    @stream.setter
    def stream(self, value):
        pass  # always the current sys.stderr (test runners and notebooks replace it)

    def emit(self, record):
        if _logging.getLogger().handlers:
            return  # the application configured the root logger; it prints the record
        own = _logging.getLogger(_LOGGER_NAME).handlers
        if any(h is not self and not isinstance(h, _logging.NullHandler) for h in own):
            return
        super().emit(record)


def get_logger() -> _logging.Logger:
    """The ``"tensorweave"`` logger, with the fallback stderr handler attached."""
    global _handler
    logger = _logging.getLogger(_LOGGER_NAME)
    if _handler is None:
        with _lock:
            if _handler is None:
                _handler = _FallbackStderrHandler()
                logger.addHandler(_handler)
    return logger


def log(level, msg, *args, **kwargs):
    """Log ``msg % args`` at ``level``."""
    kwargs.setdefault("stacklevel", 2)
    get_logger().log(level, msg, *args, **kwargs)


def _at(level):
    def f(msg, *args, **kwargs):
        kwargs.setdefault("stacklevel", 2)
        get_logger().log(level, msg, *args, **kwargs)
    return f


debug = _at(DEBUG)
info = _at(INFO)
warning = _at(WARN)
warn = warning
error = _at(ERROR)
fatal = _at(FATAL)
debug.__name__, info.__name__, warning.__name__, error.__name__, fatal.__name__ = (
    "debug", "info", "warning", "error", "fatal")


def vlog(level, msg, *args, **kwargs):
    """Log at ``level`` (an int: TF1 passes it straight to the logger)."""
    kwargs.setdefault("stacklevel", 2)
    get_logger().log(level, msg, *args, **kwargs)


def log_if(level, msg, condition, *args):
    """Log ``msg`` only when ``condition`` is true."""
    if condition:
        get_logger().log(level, msg, *args, stacklevel=2)


def _call_site_count():
    frame = _sys._getframe(2)
    key = (frame.f_code.co_filename, frame.f_lineno)
    with _lock:
        n = _counts.get(key, 0)
        _counts[key] = n + 1
    return n


def log_every_n(level, msg, n, *args):
    """Log on the 1st, (n+1)th, (2n+1)th, ... call from this line."""
    count = _call_site_count()
    if n > 0 and count % n == 0:
        get_logger().log(level, msg, *args, stacklevel=2)


def log_first_n(level, msg, n, *args):
    """Log only on the first ``n`` calls from this line."""
    if _call_site_count() < n:
        get_logger().log(level, msg, *args, stacklevel=2)


def get_verbosity() -> int:
    """The threshold of the ``"tensorweave"`` logger (inherited from the root when unset)."""
    return get_logger().getEffectiveLevel()


def set_verbosity(v):
    """Show messages at level ``v`` and above (``tw.logging.set_verbosity(tw.logging.INFO)``)."""
    get_logger().setLevel(v)


def flush():
    for h in get_logger().handlers:
        h.flush()


def TaskLevelStatusMessage(msg):  # noqa: N802 - TF1's name
    error(msg, stacklevel=3)
