"""A small CNN on scikit-learn's digits with tf.layers, tf.losses and
tf.contrib.layers.optimize_loss (optimizer by name, gradient clipping, a global step).

    python examples/tf1/cnn_digits.py --steps=150
"""

import numpy as np

import tensorweave as tf

tf.flags.DEFINE_integer("steps", 150, "training steps")
tf.flags.DEFINE_integer("batch_size", 64, "examples per step")
tf.flags.DEFINE_string("optimizer", "Adam", "an optimizer name for optimize_loss")
tf.flags.DEFINE_float("clip", 5.0, "clip gradients to this global norm")
FLAGS = tf.flags.FLAGS


def model(images, training):
    x = tf.reshape(images, [-1, 8, 8, 1])
    x = tf.layers.conv2d(x, 8, 3, padding="same", activation=tf.nn.relu, name="conv1")
    x = tf.layers.max_pooling2d(x, 2, 2)                                  # 4x4x8
    x = tf.layers.conv2d(x, 16, 3, padding="same", activation=tf.nn.relu, name="conv2")
    x = tf.layers.average_pooling2d(x, 2, 2)                              # 2x2x16
    x = tf.layers.flatten(x)
    x = tf.layers.dense(x, 64, activation=tf.nn.relu, name="fc")
    x = tf.layers.dropout(x, rate=0.3, training=training)
    return tf.layers.dense(x, 10, name="logits")


def main(_):
    from sklearn.datasets import load_digits

    d = load_digits()
    x_all = (d.data / 16.0).astype(np.float32)
    y_all = d.target.astype(np.int32)
    x_train, y_train, x_test, y_test = x_all[:1437], y_all[:1437], x_all[1437:], y_all[1437:]

    tf.set_random_seed(0)
    images = tf.placeholder(tf.float32, [None, 64])
    labels = tf.placeholder(tf.int32, [None])
    training = tf.placeholder_with_default(False, [])
    logits = model(images, training)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    global_step = tf.train.get_or_create_global_step()
    train_op = tf.contrib.layers.optimize_loss(loss, global_step, learning_rate=0.01, optimizer=FLAGS.optimizer,
                                               clip_gradients=FLAGS.clip, summaries=["loss", "learning_rate"])
    correct = tf.nn.in_top_k(logits, labels, 1)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))

    rng = np.random.RandomState(1)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, {images: x_train, labels: y_train})
        for _ in range(FLAGS.steps):
            idx = rng.randint(0, len(x_train), FLAGS.batch_size)
            sess.run(train_op, {images: x_train[idx], labels: y_train[idx], training: True})
        last, step = sess.run([loss, global_step], {images: x_train, labels: y_train})
        acc = sess.run(accuracy, {images: x_test, labels: y_test})
    print(f"global step {step}: training loss {first:.3f} -> {last:.3f}")
    print(f"test accuracy: {acc:.4f}")


if __name__ == "__main__":
    tf.app.run()
