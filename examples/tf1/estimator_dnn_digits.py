"""A canned DNNClassifier on scikit-learn's handwritten digits, fed by numpy_input_fn.

    python examples/tf1/estimator_dnn_digits.py --epochs=30 --hidden=64,32

TF1's Estimator tutorial, as written for TensorFlow: feature columns describe the 64
pixels, `tf.estimator.inputs.numpy_input_fn` batches the arrays, and the Estimator trains,
saves checkpoints in --model_dir (a temporary directory by default), evaluates the held-out
360 images and predicts a few of them. Only `import tensorweave as tf` (NumPy and
scikit-learn for the data).
"""

import shutil
import tempfile

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_integer("epochs", 30, "passes over the training set")
flags.DEFINE_integer("batch_size", 32, "examples per step")
flags.DEFINE_list("hidden", "64,32", "sizes of the hidden layers")
flags.DEFINE_string("model_dir", "", "where checkpoints go (default: a temporary directory, removed at the end)")
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
    tf.logging.set_verbosity(tf.logging.WARN)
    (x_train, y_train), (x_test, y_test) = load_digits()
    model_dir = FLAGS.model_dir or tempfile.mkdtemp(prefix="estimator_dnn_digits_")
    try:
        pixels = tf.feature_column.numeric_column("pixels", shape=[64])
        classifier = tf.estimator.DNNClassifier(
            hidden_units=[int(h) for h in FLAGS.hidden], feature_columns=[pixels], n_classes=10,
            model_dir=model_dir, config=tf.estimator.RunConfig(tf_random_seed=1, save_checkpoints_steps=500))

        train_input = tf.estimator.inputs.numpy_input_fn(
            {"pixels": x_train}, y_train, batch_size=FLAGS.batch_size, num_epochs=FLAGS.epochs, shuffle=True)
        classifier.train(input_fn=train_input)

        test_input = tf.estimator.inputs.numpy_input_fn({"pixels": x_test}, y_test, num_epochs=1, shuffle=False)
        metrics = classifier.evaluate(input_fn=test_input)
        print(f"trained {metrics['global_step']} steps; test accuracy: {metrics['accuracy']:.4f}, "
              f"average loss: {metrics['average_loss']:.4f}")

        few = tf.estimator.inputs.numpy_input_fn({"pixels": x_test[:8]}, shuffle=False)
        predicted = [int(p["class_ids"][0]) for p in classifier.predict(input_fn=few)]
        print(f"predicted {predicted}, labels {y_test[:8].tolist()}")
        print(f"variables in the checkpoint: {len(classifier.get_variable_names())}")
    finally:
        if not FLAGS.model_dir:
            shutil.rmtree(model_dir, ignore_errors=True)


if __name__ == "__main__":
    tf.app.run()
