"""The queue-era TF 1.x training loop: tf.train.slice_input_producer + shuffle_batch feeding
a model (queue runners started by the session), tf.train.MonitoredTrainingSession with a
checkpoint directory, StopAtStepHook and LoggingTensorHook; run twice, the second run
resumes from the first one's checkpoint.

    python examples/tf1/queue_pipeline_monitored.py --checkpoint_dir=/tmp/digits_ckpt
"""

import numpy as np

import tensorweave as tf

flags = tf.app.flags
flags.DEFINE_string("checkpoint_dir", None, "checkpoints (and summaries) go here")
flags.DEFINE_integer("steps_per_run", 150, "training steps in each of the two runs")
flags.mark_flag_as_required("checkpoint_dir")
FLAGS = flags.FLAGS


def run(x, y, last_step):
    """Train until the global step reaches ``last_step``; returns (first step, loss at the end)."""
    with tf.Graph().as_default():
        image, label = tf.train.slice_input_producer([x, y], shuffle=True, seed=7)
        images, labels = tf.train.shuffle_batch([image, label], batch_size=32, capacity=500,
                                                min_after_dequeue=100, num_threads=2, seed=7)
        logits = tf.layers.dense(tf.layers.dense(images, 64, activation=tf.nn.relu), 10)
        loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        step = tf.train.get_or_create_global_step()
        train = tf.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        hooks = [tf.train.StopAtStepHook(last_step=last_step),
                 tf.train.LoggingTensorHook({"step": step, "loss": loss}, every_n_iter=50)]
        first, value = None, None
        with tf.train.MonitoredTrainingSession(checkpoint_dir=FLAGS.checkpoint_dir, hooks=hooks,
                                               save_checkpoint_steps=50, save_summaries_steps=None,
                                               log_step_count_steps=None) as sess:
            while not sess.should_stop():
                _, n, value = sess.run([train, step, loss])
                first = n if first is None else first
        return first, value


def main(_):
    from sklearn.datasets import load_digits

    tf.logging.set_verbosity(tf.logging.INFO)
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)
    first, loss1 = run(x, y, FLAGS.steps_per_run)
    print(f"run 1: steps {first}..{FLAGS.steps_per_run}, loss {loss1:.4f}")
    first, loss2 = run(x, y, 2 * FLAGS.steps_per_run)
    print(f"run 2 resumed at step {first}: loss {loss2:.4f}")
    print("latest checkpoint:", tf.train.latest_checkpoint(FLAGS.checkpoint_dir))


if __name__ == "__main__":
    tf.app.run()
