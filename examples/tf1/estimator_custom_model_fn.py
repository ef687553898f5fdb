"""A custom Estimator: a model_fn built from tf.layers, trained and evaluated with
tf.estimator.train_and_evaluate, and scored with tf.metrics.

    python examples/tf1/estimator_custom_model_fn.py --max_steps=1200 --dropout=0.2

The model_fn returns an EstimatorSpec per mode (predictions, or the loss and the train op,
or the loss and eval metrics). train_and_evaluate trains on the digits' training images and
evaluates the held-out ones after each checkpoint (every --checkpoint_steps). Only
`import tensorweave as tf` (NumPy and scikit-learn for the data).
"""

import shutil
import tempfile

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_integer("max_steps", 1200, "training steps")
flags.DEFINE_integer("checkpoint_steps", 400, "steps between checkpoints (and evaluations)")
flags.DEFINE_float("dropout", 0.2, "dropout rate of the hidden layers while training")
flags.DEFINE_float("learning_rate", 0.003, "Adam's step size")
FLAGS = flags.FLAGS


def load_digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.RandomState(1).permutation(len(x))
    x, y = x[perm], y[perm]
    return (x[:1437], y[:1437]), (x[1437:], y[1437:])


def model_fn(features, labels, mode, params):
    """An MLP: 64 pixels -> hidden layers (ReLU, dropout while training) -> 10 logits."""
    net = features["pixels"]
    training = mode == tf.estimator.ModeKeys.TRAIN
    for i, units in enumerate(params["hidden_units"]):
        net = tf.layers.dense(net, units, activation=tf.nn.relu, name=f"hidden{i}")
        net = tf.layers.dropout(net, rate=params["dropout"], training=training)
    logits = tf.layers.dense(net, 10, name="logits")
    classes = tf.argmax(logits, axis=1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"class": classes, "probabilities": tf.nn.softmax(logits)})

    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={
            "accuracy": tf.metrics.accuracy(labels=labels, predictions=classes),
            "mean_per_class_accuracy": tf.metrics.mean_per_class_accuracy(labels, classes, num_classes=10),
        })
    optimizer = tf.train.AdamOptimizer(params["learning_rate"])
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


class EvalCounter(tf.train.SessionRunHook):
    """Counts the evaluations train_and_evaluate runs (an evaluation hook)."""

    def __init__(self):
        self.steps = []

    def end(self, session):
        self.steps.append(int(session.run(tf.train.get_global_step())))


def main(_):
    tf.logging.set_verbosity(tf.logging.WARN)
    (x_train, y_train), (x_test, y_test) = load_digits()
    model_dir = tempfile.mkdtemp(prefix="estimator_custom_")
    try:
        estimator = tf.estimator.Estimator(
            model_fn, model_dir=model_dir,
            params={"hidden_units": [128, 64], "dropout": FLAGS.dropout, "learning_rate": FLAGS.learning_rate},
            config=tf.estimator.RunConfig(tf_random_seed=3, save_checkpoints_steps=FLAGS.checkpoint_steps))
        train_spec = tf.estimator.TrainSpec(
            tf.estimator.inputs.numpy_input_fn({"pixels": x_train}, y_train, batch_size=32, num_epochs=None,
                                               shuffle=True),
            max_steps=FLAGS.max_steps)
        counter = EvalCounter()
        eval_spec = tf.estimator.EvalSpec(
            tf.estimator.inputs.numpy_input_fn({"pixels": x_test}, y_test, batch_size=120, shuffle=False),
            steps=None, hooks=[counter], throttle_secs=0)
        metrics, _ = tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
        print(f"evaluated at steps {counter.steps}")
        print(f"step {metrics['global_step']}: accuracy {metrics['accuracy']:.4f}, "
              f"mean per-class accuracy {metrics['mean_per_class_accuracy']:.4f}, loss {metrics['loss']:.4f}")
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


if __name__ == "__main__":
    tf.app.run()
