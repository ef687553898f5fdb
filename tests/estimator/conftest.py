"""Fixtures for the estimator tests: summary writers that Estimators open through
``FileWriterCache`` are closed after each test, so no writer thread outlives it."""

import threading

import pytest

import tensorweave as tw


@pytest.fixture(autouse=True)
def _close_summary_writers():
    before = set(threading.enumerate())
    yield
    tw.summary.FileWriterCache.clear()
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for t in left:
        t.join(timeout=10)   # a thread that is ending (a queue runner, a writer) finishes here
    assert not [t for t in left if t.is_alive()], f"threads left running: {left}"
