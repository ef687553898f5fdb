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
    # The gRPC server's event loop and grpcio's poller are the process's, started with its
    # first gRPC server and kept for its life (tensorweave_grpc.server._Loop), not the test's.
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()
            and t.name != "tw-grpc-server-loop" and "_poll_wrapper" not in t.name]
    for t in left:
        t.join(timeout=10)   # a thread that is ending (a queue runner, a writer) finishes here
    assert not [t for t in left if t.is_alive()], f"threads left running: {left}"
