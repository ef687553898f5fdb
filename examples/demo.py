"""tensorweave's demo: what is installed, then a small program on the CPU device.

    python examples/demo.py

It lists the plugins and devices that were discovered, runs the whitepaper's Figure 1
program, and shows pruning and partial execution on a tiny graph.
"""

import numpy as np

import tensorweave as tw
from tensorweave import plugins


def show_installation():
    reg = plugins.registry()
    print("plugins:")
    for p in reg.plugins:
        what = ", ".join(f"{n} {k}" for k, n in p.registered.items()) or "nothing"
        print(f"  {p.name:<10} {p.label:<28} {p.status:<8} registered {what}" + (f"  ({p.note})" if p.note else ""))
    print("devices:")
    for d in tw.list_devices():
        print(f"  {d.name}  {d.description}")


def show_partial_execution():
    print("\npartial execution (whitepaper 4.2):")
    a = tw.placeholder(tw.float32, [3], name="a")
    counter = tw.Variable(0, name="counter")
    bump = counter.assign_add(1)
    with tw.control_dependencies([bump]):
        b = tw.multiply(a, 2.0, name="b")
    c = tw.add(b, 1.0, name="c")
    with tw.Session() as s:
        s.run(counter.initializer)
        print("  c                      =", s.run(c, {a: [1, 2, 3]}), " counter =", s.run(counter))
        print("  c, feeding b directly  =", s.run(c, {b: np.zeros(3)}), " counter =", s.run(counter),
              "(b's producer did not run)")


def main():
    show_installation()
    print("\nwhitepaper Figure 1:")
    from figure1 import main as figure1

    figure1(steps=3)
    tw.reset_default_graph()
    show_partial_execution()


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
