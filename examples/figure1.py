"""The whitepaper's Figure 1 program: ReLU(Wx + b) with a placeholder and variables, run 10 times.

Written as in the paper (``import ... as tf``) with one change the paper's sketch needs to run:
``x`` is a row vector, so the product is ``matmul(x, W)`` (the paper writes ``matmul(W, x)``
with shapes that do not line up). The result is checked against NumPy.

    python examples/figure1.py
"""

import numpy as np

import tensorweave as tf


def main(steps: int = 10, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    tf.set_random_seed(seed)
    b = tf.Variable(tf.zeros([100]))                          # 100-d vector, init to zeroes
    W = tf.Variable(tf.random_uniform([784, 100], -1, 1))     # 784x100 matrix w/ random values
    x = tf.placeholder(name="x")                              # placeholder for input
    relu = tf.nn.relu(tf.matmul(x, W) + b)                    # Relu(Wx+b)
    C = tf.reduce_sum(relu)                                   # cost computed as a function of Relu

    s = tf.Session()
    s.run(tf.global_variables_initializer())
    w_value, b_value = s.run([W, b])
    worst = 0.0
    for step in range(steps):
        inp = rng.standard_normal((1, 784)).astype(np.float32)   # construct a 784-d input
        result = s.run(C, feed_dict={x: inp})                   # fetch cost, feeding x=input
        expect = np.maximum(inp @ w_value + b_value, 0).sum()
        worst = max(worst, abs(float(result) - float(expect)) / max(1.0, abs(float(expect))))
        print(step, result)
    s.close()
    print(f"largest relative difference from NumPy: {worst:.2e}")
    return worst


if __name__ == "__main__":
    assert main() < 1e-4
