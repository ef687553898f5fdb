"""Checkpoint throughput: Saver.save / Saver.restore of 200 MB of float32 variables, against
writing the same arrays with ``np.save`` (no fsync). Prints the best of ``--rounds``.

    python benchmarks/checkpoint.py [--size 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import tensorweave as tw


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=5000, help="each of the two variables is size x size float32")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.size
    with tempfile.TemporaryDirectory() as d:
        vs = [tw.Variable(tw.random_uniform([n, n]), name=f"v{i}") for i in range(2)]
        saver = tw.train.Saver(max_to_keep=1)
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            saver.save(sess, os.path.join(d, "warm"))
            save, restore = [], []
            for i in range(args.rounds):
                t = time.perf_counter()
                path = saver.save(sess, os.path.join(d, "m"), global_step=i)
                save.append(time.perf_counter() - t)
                t = time.perf_counter()
                saver.restore(sess, path)
                restore.append(time.perf_counter() - t)
            t = time.perf_counter()
            tw.train.load_variable(path, "v0")
            load_one = time.perf_counter() - t
            vals = sess.run(vs)
        npy = []
        for i in range(args.rounds):
            t = time.perf_counter()
            for j, v in enumerate(vals):
                np.save(os.path.join(d, f"np{i}_{j}.npy"), v)
            npy.append(time.perf_counter() - t)
    mb = 2 * n * n * 4 / 1e6
    print(f"{mb:.0f} MB in 2 variables, best of {args.rounds}:")
    print(f"  Saver.save     {min(save):.3f} s  ({mb / min(save):.0f} MB/s, fsynced)")
    print(f"  Saver.restore  {min(restore):.3f} s  ({mb / min(restore):.0f} MB/s, CRC-32 checked)")
    print(f"  load_variable  {load_one:.3f} s  (one {mb / 2:.0f} MB tensor)")
    print(f"  np.save        {min(npy):.3f} s  (same arrays, no fsync)")


if __name__ == "__main__":
    main()
