"""tensorweave's demo (the README's first command): what is installed, then training.

    python examples/demo.py

Lists the plugins and devices that were discovered, then trains an MLP and a small CNN on
scikit-learn's handwritten digits and reports their accuracy on a held-out 20%.
"""

import importlib.util
import os
import sys
import tempfile
import time

import tensorweave as tw
from tensorweave import plugins

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import digits  # noqa: E402  (the example next to this file)


def show_installation():
    reg = plugins.registry()
    print(f"tensorweave {tw.__version__}; plugins:")
    for p in reg.plugins:
        what = ", ".join(f"{n} {k}" for k, n in p.registered.items()) or "nothing"
        print(f"  {p.name:<10} {p.label:<28} {p.status:<8} registered {what}" + (f"  ({p.note})" if p.note else ""))
    print("devices:")
    for d in tw.list_devices():
        print(f"  {d.name}  {d.description}")


def main(argv=None):
    show_installation()
    print("\ntraining on scikit-learn's digits (1797 8x8 images; 80% train, 20% held out)")
    out = os.path.join(tempfile.gettempdir(), "tensorweave-demo")
    # Summaries need the tensorboard package (the core's `tensorboard` extra; tox installs it).
    logdir = os.path.join(out, "logs") if importlib.util.find_spec("tensorboard") else None
    t0 = time.perf_counter()
    results = {m: digits.train(m, logdir=logdir, trace=os.path.join(out, "traces")) for m in ("mlp", "cnn")}
    if logdir is not None:
        print(f"\nsummaries and the graph: tensorboard --logdir {logdir}")
    else:
        print("\n(no summaries: pip install 'tensorweave[tensorboard]' to write them)")
    print(f"timelines of one training step: {os.path.join(out, 'traces')}/*.json (open in https://ui.perfetto.dev)")
    print("held-out test accuracy: " + ", ".join(f"{m} {a:.2%}" for m, a in results.items())
          + f"  (total {time.perf_counter() - t0:.1f}s)")
    return 0 if min(results.values()) >= 0.97 else 1


if __name__ == "__main__":
    sys.exit(main())
