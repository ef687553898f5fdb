"""A multilayer perceptron on scikit-learn's handwritten digits, with tf.contrib.layers,
tf.losses (label smoothing, L2 regularization through get_total_loss) and tf.app.run.

    python examples/tf1/mlp_digits.py --epochs=15 --hidden=64,32

The data set ships with scikit-learn (1797 8x8 images): 1437 to train, 360 to test.
"""

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_integer("epochs", 15, "passes over the training set")
flags.DEFINE_integer("batch_size", 64, "examples per step")
flags.DEFINE_list("hidden", "128,64", "sizes of the hidden layers")
flags.DEFINE_float("l2", 1e-4, "L2 regularization of the weights")
flags.DEFINE_enum("optimizer", "Adam", ["Adam", "SGD", "RMSProp"], "which optimizer")
FLAGS = flags.FLAGS


def load_digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.RandomState(0).permutation(len(x))
    x, y = x[perm], y[perm]
    return (x[:1437], y[:1437]), (x[1437:], y[1437:])


def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)
    tf.set_random_seed(1)
    (x_train, y_train), (x_test, y_test) = load_digits()

    images = tf.placeholder(tf.float32, [None, 64], name="images")
    labels = tf.placeholder(tf.int64, [None], name="labels")
    net = images
    with tf.contrib.framework.arg_scope([tf.contrib.layers.fully_connected],
                                        weights_regularizer=tf.contrib.layers.l2_regularizer(FLAGS.l2)):
        for i, units in enumerate(int(h) for h in FLAGS.hidden):
            net = tf.contrib.layers.fully_connected(net, units, scope=f"hidden{i}")
        logits = tf.contrib.layers.fully_connected(net, 10, activation_fn=None, scope="logits")
    tf.losses.softmax_cross_entropy(tf.one_hot(labels, 10), logits, label_smoothing=0.05)
    total_loss = tf.losses.get_total_loss()          # cross-entropy + the regularization losses
    optimizer = {"Adam": tf.train.AdamOptimizer(0.01), "SGD": tf.train.GradientDescentOptimizer(0.5),
                 "RMSProp": tf.train.RMSPropOptimizer(0.005)}[FLAGS.optimizer]
    train_op = optimizer.minimize(total_loss)
    accuracy = tf.reduce_mean(tf.to_float(tf.equal(tf.argmax(logits, 1), labels)))

    rng = np.random.RandomState(0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for epoch in range(FLAGS.epochs):
            order = rng.permutation(len(x_train))
            for start in range(0, len(order), FLAGS.batch_size):
                idx = order[start:start + FLAGS.batch_size]
                sess.run(train_op, {images: x_train[idx], labels: y_train[idx]})
            if (epoch + 1) % 5 == 0:
                loss = sess.run(total_loss, {images: x_train, labels: y_train})
                tf.logging.info("epoch %d: total loss %.4f", epoch + 1, loss)
        reg = sess.run(tf.losses.get_regularization_loss())
        acc = sess.run(accuracy, {images: x_test, labels: y_test})
    print(f"regularization losses: {len(tf.losses.get_regularization_losses())} ({reg:.5f})")
    print(f"test accuracy: {acc:.4f}")


if __name__ == "__main__":
    tf.app.run()
