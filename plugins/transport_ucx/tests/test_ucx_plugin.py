"""The UCX plugin is found through its entry point, registers transport ``ucx`` and says
which ucxx it found, without importing ucxx (that loads UCX)."""

import subprocess
import sys
from importlib import metadata

from tensorweave import plugins


def test_discovered_and_registers_the_transport():
    reg = plugins.registry()
    info = {p.name: p for p in reg.plugins}["ucx"]
    assert info.distribution == "tensorweave-ucx"
    assert info.status == "loaded", info.error
    assert info.note.startswith("transport ucx (")
    assert "ucxx" in info.note
    assert "ucx" in reg.transports
    from tensorweave.distributed.transport import get_transport

    assert get_transport("ucx").name == "ucx"


def test_ucxx_is_a_hard_dependency():
    requires = metadata.requires("tensorweave-ucx") or []
    assert any(r.startswith("ucxx-cu12") and "extra" not in r for r in requires), requires


def test_loading_plugins_does_not_import_ucxx():
    code = ("import sys; from tensorweave import plugins; plugins.registry(); "
            "print('ucxx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
