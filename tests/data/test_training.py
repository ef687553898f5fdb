"""A small model trained from a tw.data pipeline: scikit-learn's digits written to a TFRecord
file, parsed, shuffled, batched and prefetched, feeding get_next() straight into an MLP."""

from __future__ import annotations

import numpy as np

import tensorweave as tw
from tensorweave import data as tw_data


def write_digits(path):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    with tw.python_io.TFRecordWriter(path) as w:
        for xi, yi in zip(x, y):
            w.write(xi.tobytes() + yi.tobytes())  # 64 float32 pixels, then the int64 label
    return len(y)


def test_mlp_trained_from_a_dataset_learns(tmp_path):
    path = str(tmp_path / "digits.tfrecord")
    n = write_digits(path)
    tw.set_random_seed(0)

    def parse(record):
        values = tw.decode_raw(record, tw.float32)  # 64 pixels + the label's 8 bytes as 2 float32
        pixels = tw.reshape(values[:64], [64])
        label = tw.reshape(tw.decode_raw(record, tw.int64)[32:], [])
        return pixels, label

    ds = (tw_data.TFRecordDataset(path).map(parse, num_parallel_calls=2).shuffle(500).repeat(8)
          .batch(64).prefetch(2))
    x, y = ds.make_one_shot_iterator().get_next()
    assert x.shape == tw.TensorShape([None, 64]) and y.dtype is tw.int64
    rng = np.random.default_rng(0)
    w1 = tw.Variable((rng.standard_normal((64, 64)) * 0.1).astype(np.float32))
    b1 = tw.Variable(np.zeros(64, np.float32))
    w2 = tw.Variable((rng.standard_normal((64, 10)) * 0.1).astype(np.float32))
    b2 = tw.Variable(np.zeros(10, np.float32))
    logits = tw.matmul(tw.nn.relu(tw.matmul(x, w1) + b1), w2) + b2
    loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=tw.cast(y, tw.int32), logits=logits))
    train = tw.train.GradientDescentOptimizer(0.5).minimize(loss)
    losses = []
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        while True:
            try:
                losses.append(sess.run([loss, train])[0])
            except tw.errors.OutOfRangeError:
                break
    assert len(losses) == -(-8 * n // 64)  # every element of 8 epochs was seen, in batches of 64
    assert np.mean(losses[:5]) > 1.5
    assert np.mean(losses[-10:]) < 0.3
