"""The input-pipeline programs in examples/tf1/ run as written and learn: tf.data + a custom
Estimator, TFRecord files read through tf.data with summaries, and the queue-era pipeline
under MonitoredTrainingSession resuming from its checkpoint."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tf1"
pytest.importorskip("sklearn", reason="the examples load scikit-learn's bundled digits")


def _run(name, *args):
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=EXAMPLES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, proc.stderr


def test_tf_data_input_fns_with_a_custom_estimator(tmp_path):
    out, _ = _run("data_estimator_digits.py", "--steps=400", f"--model_dir={tmp_path}")
    step, acc = re.search(r"evaluated at step (\d+): accuracy (\S+),", out).groups()
    assert int(step) == 400 and float(acc) >= 0.93, out
    predicted, labels = re.search(r"predicted (\[.*\]) labels (\[.*\])", out).groups()
    assert sum(a == b for a, b in zip(ast.literal_eval(predicted), ast.literal_eval(labels))) >= 8


def test_tfrecord_files_through_tf_data_with_summaries(tmp_path):
    pytest.importorskip("tensorboard", reason="the program writes summaries")
    out, _ = _run("tfrecord_pipeline.py", f"--data_dir={tmp_path / 'data'}", f"--logdir={tmp_path / 'logs'}",
                  "--epochs=6")
    assert out.count("30 batches") == 6  # 1500 records in 3 files, batches of 50, every epoch re-initialised
    assert float(re.search(r"3 files, held-out accuracy: (\S+)", out).group(1)) >= 0.85, out
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(tmp_path / "logs"))
    acc.Reload()
    losses = acc.Scalars("loss")
    assert len(losses) == 180 and losses[-1].value < losses[0].value


def test_queue_pipeline_under_monitored_training_session_resumes(tmp_path):
    out, err = _run("queue_pipeline_monitored.py", f"--checkpoint_dir={tmp_path}", "--steps_per_run=100")
    assert "run 1: steps 1..100" in out and "run 2 resumed at step 101" in out, out
    assert out.strip().endswith("model.ckpt-200")
    assert "loss = " in err  # LoggingTensorHook through tf.logging
