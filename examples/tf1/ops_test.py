"""Unit tests in TF1's style: tf.test.TestCase, sessions, assertAllClose, tf.test.main.

    python examples/tf1/ops_test.py
"""

import numpy as np

import tensorweave as tf


def smooth_l1(x):
    """Huber loss with delta 1, written with ops: the function under test."""
    a = tf.abs(x)
    small = tf.minimum(a, 1.0)
    return 0.5 * tf.square(small) + (a - small)


class SmoothL1Test(tf.test.TestCase):
    def testValues(self):
        x = np.array([-3.0, -0.5, 0.0, 0.5, 2.0], np.float32)
        with self.session():
            expected = np.where(np.abs(x) < 1, 0.5 * x ** 2, np.abs(x) - 0.5)
            self.assertAllClose(smooth_l1(tf.constant(x)).eval(), expected)

    def testMatchesHuberLoss(self):
        x = tf.constant([[-3.0, -0.5], [0.25, 2.0]])
        with self.cached_session():
            ours = tf.reduce_mean(smooth_l1(x))
            theirs = tf.losses.huber_loss(tf.zeros_like(x), x, delta=1.0)
            self.assertAllCloseAccordingToType(ours, theirs)

    def testGradient(self):
        x = tf.placeholder(tf.float64, [4])
        y = smooth_l1(x)
        with self.session():
            err = tf.test.compute_gradient_error(x, [4], y, [4], x_init_value=np.array([-2.0, -0.3, 0.4, 1.5]))
        self.assertLess(err, 1e-6)

    def testShape(self):
        x = np.zeros((3, 2), np.float32)
        self.assertShapeEqual(x, smooth_l1(tf.constant(x)))


if __name__ == "__main__":
    tf.test.main()
