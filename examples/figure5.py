"""The whitepaper's Figures 1 and 5: gradients of a cost C with respect to b, W and x.

``tw.gradients(C, [b, W, x])`` adds the gradient nodes of Figure 5 to the graph; the values
are checked against the derivatives written out by hand in NumPy.

    python examples/figure5.py
"""

import numpy as np

import tensorweave as tf


def main(seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    b = tf.Variable(tf.zeros([100]))
    W = tf.Variable(tf.random_uniform([784, 100], -1, 1, seed=seed))
    x = tf.placeholder(tf.float32, [1, 784], name="x")
    relu = tf.nn.relu(tf.matmul(x, W) + b)
    C = tf.reduce_sum(tf.square(relu))                 # a cost computed from Relu
    db, dW, dx = tf.gradients(C, [b, W, x])            # Figure 5

    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        inp = rng.standard_normal((1, 784)).astype(np.float32)
        w_value = s.run(W)
        got = s.run([db, dW, dx], {x: inp})
    pre = inp @ w_value
    dpre = 2 * np.maximum(pre, 0) * (pre > 0)          # dC/d(xW+b)
    expect = [dpre[0], inp.T @ dpre, dpre @ w_value.T]
    worst = max(float(np.max(np.abs(g - e)) / (1 + np.max(np.abs(e)))) for g, e in zip(got, expect))
    for name, g in zip(["dC/db", "dC/dW", "dC/dx"], got):
        print(f"{name}: shape {g.shape}, norm {np.linalg.norm(g):.3f}")
    print(f"largest relative difference from hand-written NumPy: {worst:.2e}")
    return worst


if __name__ == "__main__":
    assert main() < 1e-4
