"""A canned LinearRegressor on scikit-learn's diabetes data, with feature columns.

    python examples/tf1/estimator_linear_regressor.py --epochs=60

Ten numeric measurements predict disease progression a year later. Each measurement is a
tf.feature_column.numeric_column (standardized by a normalizer_fn), and body-mass index also
enters bucketized. The LinearRegressor trains with its default optimizer (FTRL), and its
test R^2 is compared with an exact least-squares fit computed by NumPy. Only
`import tensorweave as tf` (NumPy and scikit-learn for the data).
"""

import shutil
import tempfile

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_integer("epochs", 60, "passes over the training set")
flags.DEFINE_integer("batch_size", 32, "examples per step")
FLAGS = flags.FLAGS

NAMES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def load_diabetes():
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    x, y = d.data.astype(np.float32), d.target.astype(np.float32)
    perm = np.random.RandomState(0).permutation(len(x))
    x, y = x[perm], y[perm]
    return (x[:350], y[:350]), (x[350:], y[350:])


def r2(y, pred):
    return 1.0 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2)


def main(_):
    tf.logging.set_verbosity(tf.logging.WARN)
    (x_train, y_train), (x_test, y_test) = load_diabetes()
    mean, std = x_train.mean(0), x_train.std(0)
    y_mean, y_std = y_train.mean(), y_train.std()

    def standardize(i):
        return lambda t: (t - float(mean[i])) / float(std[i])
    columns = [tf.feature_column.numeric_column(name, normalizer_fn=standardize(i)) for i, name in enumerate(NAMES)]
    bmi_buckets = tf.feature_column.bucketized_column(columns[2], boundaries=list(np.percentile(x_train[:, 2],
                                                                                               [25, 50, 75])))
    columns.append(bmi_buckets)

    def features(x):
        return {name: x[:, i] for i, name in enumerate(NAMES)}

    model_dir = tempfile.mkdtemp(prefix="estimator_linear_")
    try:
        regressor = tf.estimator.LinearRegressor(feature_columns=columns, model_dir=model_dir,
                                                 config=tf.estimator.RunConfig(tf_random_seed=0))
        # the model learns the standardized target; predictions are scaled back below
        regressor.train(tf.estimator.inputs.numpy_input_fn(
            features(x_train), (y_train - y_mean) / y_std, batch_size=FLAGS.batch_size, num_epochs=FLAGS.epochs,
            shuffle=True))
        result = regressor.evaluate(tf.estimator.inputs.numpy_input_fn(
            features(x_test), (y_test - y_mean) / y_std, batch_size=len(x_test), shuffle=False))
        predictions = np.array([p["predictions"][0] for p in regressor.predict(
            tf.estimator.inputs.numpy_input_fn(features(x_test), shuffle=False))]) * y_std + y_mean

        # the exact least-squares fit on the same measurements, for comparison
        design = np.hstack([x_train, np.ones((len(x_train), 1), np.float32)])
        coef, *_ = np.linalg.lstsq(design, y_train, rcond=None)
        exact = np.hstack([x_test, np.ones((len(x_test), 1), np.float32)]) @ coef

        bmi_weight = regressor.get_variable_value("linear/linear_model/bmi/weights")[0, 0]
        print(f"trained {result['global_step']} steps; test average loss (standardized) {result['average_loss']:.4f}")
        print(f"bmi weight {bmi_weight:.3f} (per standard deviation, standardized target)")
        print(f"test R^2: LinearRegressor {r2(y_test, predictions):.4f}, least squares {r2(y_test, exact):.4f}")
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


if __name__ == "__main__":
    tf.app.run()
