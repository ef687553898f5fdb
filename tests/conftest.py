"""Shared fixtures: every test starts with a fresh default graph."""

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
