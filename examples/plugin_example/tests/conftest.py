"""Run the example's tests from a source checkout too: when the distribution is not
installed, register its plugin module directly (an installed copy is found by its entry point)."""

import importlib.metadata as md
import sys
from pathlib import Path

import pytest

import tensorweave as tw


def _installed() -> bool:
    return any(ep.value == "tw_example_op.plugin" for ep in md.entry_points(group="tensorweave"))


if not _installed():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tw_example_op import plugin

    from tensorweave import plugins

    if "ScaledSoftsign" not in plugins.registry().ops:
        plugins.register_plugin(plugin, name="example_op", distribution="tensorweave-example-op (source)")


@pytest.fixture(autouse=True)
def _fresh_default_graph():
    tw.reset_default_graph()
    yield
    tw.reset_default_graph()
