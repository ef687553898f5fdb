"""The digits classifier as a TF 1.x tutorial of the tf.data era writes it: input functions
built from tf.data (from_tensor_slices -> shuffle -> repeat -> batch -> prefetch), a custom
model_fn with tf.layers, tf.losses and tf.metrics, and an Estimator that trains, evaluates
from its checkpoint and predicts.

    python examples/tf1/data_estimator_digits.py --steps=600
"""

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_integer("steps", 600, "training steps")
flags.DEFINE_integer("batch_size", 64, "examples per step")
flags.DEFINE_string("model_dir", None, "where the Estimator keeps its checkpoints (default: a temporary directory)")
FLAGS = flags.FLAGS


def load_digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)
    perm = np.random.RandomState(0).permutation(len(x))
    return (x[perm[:1437]], y[perm[:1437]]), (x[perm[1437:]], y[perm[1437:]])


def train_input_fn(x, y, batch_size):
    ds = tf.data.Dataset.from_tensor_slices(({"pixels": x}, y))
    return ds.shuffle(1000, seed=1).repeat().batch(batch_size).prefetch(2)


def eval_input_fn(x, y, batch_size):
    return tf.data.Dataset.from_tensor_slices(({"pixels": x}, y)).batch(batch_size)


def model_fn(features, labels, mode, params):
    net = features["pixels"]
    for units in params["hidden"]:
        net = tf.layers.dense(net, units, activation=tf.nn.relu)
    logits = tf.layers.dense(net, 10)
    predicted = tf.argmax(logits, 1, output_type=tf.int32)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"class": predicted, "probabilities": tf.nn.softmax(logits)})
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    metrics = {"accuracy": tf.metrics.accuracy(labels, predicted)}
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    train_op = tf.train.AdamOptimizer(params["learning_rate"]).minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def main(_):
    tf.logging.set_verbosity(tf.logging.WARN)
    (x_train, y_train), (x_test, y_test) = load_digits()
    classifier = tf.estimator.Estimator(model_fn, model_dir=FLAGS.model_dir,
                                        params={"hidden": [64, 32], "learning_rate": 0.01},
                                        config=tf.estimator.RunConfig(tf_random_seed=1, save_summary_steps=None))
    classifier.train(lambda: train_input_fn(x_train, y_train, FLAGS.batch_size), steps=FLAGS.steps)
    result = classifier.evaluate(lambda: eval_input_fn(x_test, y_test, 128))
    print(f"evaluated at step {result['global_step']}: accuracy {result['accuracy']:.4f}, loss {result['loss']:.4f}")
    preds = list(classifier.predict(lambda: eval_input_fn(x_test[:10], y_test[:10], 10)))
    print("predicted", [int(p["class"]) for p in preds], "labels", y_test[:10].tolist())


if __name__ == "__main__":
    tf.app.run()
