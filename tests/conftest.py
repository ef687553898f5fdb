"""Shared fixtures: every test starts with a fresh default graph and the ``tensorweave``
logger's level as it found it; ``bounded_time`` turns a hang (a step that never finishes) into
a failure with every thread's traceback."""

import faulthandler
import logging

import pytest

import tensorweave as tw


@pytest.fixture(autouse=True)
def _fresh_default_graph():
    tw.reset_default_graph()
    yield
    tw.reset_default_graph()


@pytest.fixture(autouse=True)
def _restore_logging_level():
    # Programs run in-process (the docs' examples, TF1 programs) call
    # tw.logging.set_verbosity; a level left behind hides INFO records from every later test
    # that reads its log (caplog), depending on which tests ran first in that process.
    logger = logging.getLogger("tensorweave")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.fixture
def sess():
    with tw.Session() as s:
        yield s


@pytest.fixture
def bounded_time():
    """Dump every thread's traceback and exit if the test runs for more than 4 minutes."""
    faulthandler.dump_traceback_later(240, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
