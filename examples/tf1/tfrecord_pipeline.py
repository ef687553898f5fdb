"""Write the digits to TFRecord files, then train on them with the input pipeline TF 1.x
programs use: TFRecordDataset -> map (decode, with 2 parallel calls) -> shuffle -> batch ->
prefetch, an initializable iterator re-run every epoch (tf.errors.OutOfRangeError ends an
epoch), and TensorBoard summaries of the loss from a tf.summary.FileWriter.

    python examples/tf1/tfrecord_pipeline.py --data_dir=/tmp/digits --logdir=/tmp/digits/logs
"""

import os

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_string("data_dir", None, "where to write the TFRecord files")
flags.DEFINE_string("logdir", None, "where to write the summaries (none if not given)")
flags.DEFINE_integer("epochs", 8, "passes over the training files")
flags.mark_flag_as_required("data_dir")
FLAGS = flags.FLAGS


def write_records(data_dir):
    """Each example: 64 float32 pixels and the label (as a float32), as raw bytes."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.float32)
    tf.gfile.MakeDirs(data_dir)
    paths = []
    for shard, rows in enumerate(np.array_split(np.arange(1500), 3)):
        path = os.path.join(data_dir, f"train-{shard:05d}-of-00003.tfrecord")
        with tf.python_io.TFRecordWriter(path) as w:
            for i in rows:
                w.write(np.append(x[i], y[i]).tobytes())
        paths.append(path)
    return paths, (x[1500:], y[1500:])


def decode(record):
    values = tf.decode_raw(record, tf.float32)
    return tf.reshape(values[:64], [64]), tf.cast(values[64], tf.int32)


def model(images):
    with tf.variable_scope("model", reuse=tf.AUTO_REUSE):
        hidden = tf.layers.dense(images, 64, activation=tf.nn.relu, name="hidden")
        return tf.layers.dense(hidden, 10, name="logits")


def main(_):
    paths, (x_test, y_test) = write_records(FLAGS.data_dir)
    y_test = y_test.astype(np.int64)
    files = tf.data.Dataset.list_files(os.path.join(FLAGS.data_dir, "train-*.tfrecord"), shuffle=False)
    ds = (tf.data.TFRecordDataset(files).map(decode, num_parallel_calls=2)
          .shuffle(500, seed=3).batch(50).prefetch(2))
    it = ds.make_initializable_iterator()
    images, labels = it.get_next()
    loss = tf.losses.sparse_softmax_cross_entropy(labels, model(images))
    step = tf.train.get_or_create_global_step()
    train = tf.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
    tf.summary.scalar("loss", loss)
    summaries = tf.summary.merge_all()
    x_eval = tf.placeholder(tf.float32, [None, 64])
    eval_logits = model(x_eval)  # the same variables
    writer = tf.summary.FileWriter(FLAGS.logdir) if FLAGS.logdir else None
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for epoch in range(FLAGS.epochs):
            sess.run(it.initializer)
            batches = 0
            while True:
                try:
                    _, s, n = sess.run([train, summaries, step])
                except tf.errors.OutOfRangeError:
                    break
                batches += 1
                if writer is not None:
                    writer.add_summary(s, n)
            print(f"epoch {epoch + 1}: {batches} batches")
        predicted = sess.run(tf.argmax(eval_logits, 1), {x_eval: x_test})
    if writer is not None:
        writer.close()
    print(f"{len(paths)} files, held-out accuracy: {np.mean(predicted == y_test):.4f}")


if __name__ == "__main__":
    tf.app.run()
