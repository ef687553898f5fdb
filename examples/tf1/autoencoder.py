"""A convolutional autoencoder on scikit-learn's digits (tf.layers.conv2d and
conv2d_transpose), writing its results with tf.gfile.

    python examples/tf1/autoencoder.py --output_dir=/tmp/ae --steps=200

Writes <output_dir>/reconstruction.csv (the mean squared error per digit class) and
<output_dir>/summary.txt, then reads them back with tf.gfile.
"""

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_string("output_dir", None, "where to write the results (created if missing)")
flags.DEFINE_integer("steps", 200, "training steps")
flags.mark_flag_as_required("output_dir")
FLAGS = flags.FLAGS


def main(_):
    from sklearn.datasets import load_digits

    d = load_digits()
    data = (d.data / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)

    tf.set_random_seed(0)
    x = tf.placeholder(tf.float32, [None, 8, 8, 1])
    h = tf.layers.conv2d(x, 16, 3, strides=2, padding="same", activation=tf.nn.relu)             # 4x4x16
    code = tf.layers.conv2d(h, 8, 3, strides=2, padding="same", activation=tf.nn.relu)           # 2x2x8
    h = tf.layers.conv2d_transpose(code, 16, 3, strides=2, padding="same", activation=tf.nn.relu)  # 4x4x16
    out = tf.layers.conv2d_transpose(h, 1, 3, strides=2, padding="same", activation=tf.nn.sigmoid)  # 8x8x1
    loss = tf.losses.mean_squared_error(x, out)
    per_image = tf.reduce_mean(tf.square(out - x), axis=[1, 2, 3])
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)

    rng = np.random.RandomState(0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, {x: data})
        for _ in range(FLAGS.steps):
            sess.run(train_op, {x: data[rng.randint(0, len(data), 64)]})
        final, errors = sess.run([loss, per_image], {x: data})

    if not tf.gfile.Exists(FLAGS.output_dir):
        tf.gfile.MakeDirs(FLAGS.output_dir)
    csv_path = FLAGS.output_dir + "/reconstruction.csv"
    with tf.gfile.GFile(csv_path, "w") as f:
        f.write("digit,mse\n")
        for digit in range(10):
            f.write(f"{digit},{errors[d.target == digit].mean():.5f}\n")
    with tf.gfile.GFile(FLAGS.output_dir + "/summary.txt", "w") as f:
        f.write(f"mse {first:.5f} -> {final:.5f}\n")
    with tf.gfile.GFile(csv_path) as f:
        rows = f.read().strip().splitlines()
    print(f"wrote {tf.gfile.ListDirectory(FLAGS.output_dir)} ({len(rows) - 1} digits, "
          f"{tf.gfile.Stat(csv_path).length} bytes)")
    print(f"reconstruction mse {first:.4f} -> {final:.4f}")


if __name__ == "__main__":
    tf.app.run()
