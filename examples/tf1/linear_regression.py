"""Linear regression, TF1 style: flags, tf.logging and tf.app.run.

    python examples/tf1/linear_regression.py --steps=300 --learning_rate=0.1

Fits y = 3x - 2 (plus noise) with a weight and a bias; logs the loss every 50 steps and
prints the fitted parameters. Only `import tensorweave as tf` (and NumPy for the data).
"""

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_integer("steps", 300, "training steps", lower_bound=1)
flags.DEFINE_float("learning_rate", 0.1, "gradient descent step size")
flags.DEFINE_integer("seed", 0, "random seed of the data")
flags.DEFINE_boolean("verbose", True, "log the loss while training")
FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        tf.logging.warning("ignoring arguments %s", argv[1:])
    tf.logging.set_verbosity(tf.logging.INFO if FLAGS.verbose else tf.logging.WARN)
    rng = np.random.RandomState(FLAGS.seed)
    x_data = rng.rand(100, 1).astype(np.float32)
    y_data = 3.0 * x_data - 2.0 + 0.01 * rng.randn(100, 1).astype(np.float32)

    x = tf.placeholder(tf.float32, [None, 1], name="x")
    y = tf.placeholder(tf.float32, [None, 1], name="y")
    w = tf.Variable(tf.zeros([1, 1]), name="weight")
    b = tf.Variable(tf.zeros([1]), name="bias")
    loss = tf.losses.mean_squared_error(y, tf.matmul(x, w) + b)
    train_op = tf.train.GradientDescentOptimizer(FLAGS.learning_rate).minimize(
        loss, var_list={"w": w, "b": b}.values())   # any iterable of variables, as TF1 programs pass

    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(FLAGS.steps):
            _, value = sess.run([train_op, loss], {x: x_data, y: y_data})
            tf.logging.log_every_n(tf.logging.INFO, "step %d: loss %.5f", 50, step, value)
        w_val, b_val, final = sess.run([w, b, loss], {x: x_data, y: y_data})
    print(f"w = {w_val[0, 0]:.3f}, b = {b_val[0]:.3f}, final loss = {final:.6f}")
    return 0


if __name__ == "__main__":
    tf.app.run()
