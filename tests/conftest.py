"""Shared fixtures: every test starts with a fresh default graph; ``bounded_time`` turns a
hang (a step that never finishes) into a failure with every thread's traceback."""

import faulthandler

import pytest

import tensorweave as tw


@pytest.fixture(autouse=True)
def _fresh_default_graph():
    tw.reset_default_graph()
    yield
    tw.reset_default_graph()


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
