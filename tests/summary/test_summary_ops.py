"""Summary ops: what each produces (decoded with tensorboard's protos, PNG with Pillow, WAV
with the stdlib), tags, collections, placement on the CPU, loops, and bad input."""

import bisect
import io
import logging
import sys
import wave

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.kernels import summary as summary_kernels
from tensorweave.testing.fake_device import register_fake_devices


@pytest.fixture(autouse=True)
def _forget_fake_devices():
    """Tests here register FAKE devices; later test files see only the installed plugins
    (in-process servers would otherwise offer FAKE devices to their placers)."""
    yield
    if "FAKE" in plugins.registry().device_factories:
        plugins._reset_for_tests()

pytest.importorskip("tensorboard")

FAKE0 = "/device:FAKE:0"


def parse(serialized):
    return tw.summary.Summary.FromString(serialized)


def run(fetches, feed=None):
    with tw.Session() as sess:
        return sess.run(fetches, feed)


# --- scalar ---------------------------------------------------------------------------------
def test_scalar_names_tags_and_collection():
    x = tw.placeholder(tw.float32, [])
    s = tw.summary.scalar("loss", x)
    s2 = tw.summary.scalar("loss", x * 2)
    with tw.name_scope("train"):
        s3 = tw.summary.scalar("acc", x, family="metrics")
    assert s.dtype == tw.string and s.shape.as_list() == [] and s.op.type == "ScalarSummary"
    assert (s.op.name, s2.op.name, s3.op.name) == ("loss", "loss_1", "train/metrics/acc")
    assert "CPU" in s.op.device
    assert tw.get_collection(tw.GraphKeys.SUMMARIES) == [s, s2, s3]
    out = run([s, s2, s3], {x: 1.5})
    vals = [(v.tag, v.simple_value) for o in out for v in parse(o).value]
    assert vals == [("loss", 1.5), ("loss_1", 3.0), ("metrics/train/metrics/acc", 1.5)]


def test_collections_argument_and_merge_all():
    a = tw.summary.scalar("a", 1.0)
    b = tw.summary.scalar("b", 2.0, collections=["mine"])
    c = tw.summary.scalar("c", 3.0, collections=[])
    assert tw.get_collection(tw.GraphKeys.SUMMARIES) == [a]
    assert tw.get_collection("mine") == [b]
    assert tw.summary.merge_all("nothing_here") is None
    merged = tw.summary.merge_all()
    mine = tw.summary.merge([b, c], collections=["merged"])
    assert tw.get_collection("merged") == [mine]
    out = run([merged, mine])
    assert [v.tag for v in parse(out[0]).value] == ["a"]
    assert [(v.tag, v.simple_value) for v in parse(out[1]).value] == [("b", 2.0), ("c", 3.0)]


def test_tag_sanitised_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="tensorweave.summary"):
        s = tw.summary.scalar("/loss (train)", 1.0)
    assert "not a valid TensorBoard tag" in caplog.text and "'loss__train_'" in caplog.text
    assert [v.tag for v in parse(run(s)).value] == ["loss__train_"]


def test_merge_rejects_duplicate_tags():
    a = tw.summary.scalar("x", 1.0, collections=[])
    b = tw.summary.histogram("y", [1.0], collections=[])
    dup = tw.summary.merge([a, tw.summary.merge([a, b])])
    with pytest.raises(tw.errors.InvalidArgumentError, match="MergeSummary.*duplicate tag 'x'"):
        run(dup)


# --- histogram ---------------------------------------------------------------------------------
def _reference_histogram(values):
    """TF's Histogram::Add + EncodeToProto(preserve_zero_buckets=False), written plainly."""
    limits = list(summary_kernels.BUCKET_LIMITS)
    counts = [0.0] * len(limits)
    for v in values:
        counts[min(bisect.bisect_right(limits, v), len(limits) - 1)] += 1
    out, i = [], 0
    while i < len(counts):
        end, count, j = limits[i], counts[i], i + 1
        if count == 0:
            while j < len(counts) and counts[j] == 0:
                end, count, j = limits[j], counts[j], j + 1
        out.append((end, count))
        i = j
    return out


def test_histogram_buckets_are_tfs():
    limits = summary_kernels.BUCKET_LIMITS
    assert limits[0] == -sys.float_info.max and limits[-1] == sys.float_info.max and 0.0 in limits
    pos = limits[limits > 0]
    assert pos[0] == 1e-12 and np.allclose(pos[1:-1] / pos[:-2], 1.1)
    assert len(limits) == 2 * 775 + 1  # 774 growing limits and DBL_MAX on each side, and 0
    values = np.concatenate([np.random.RandomState(0).normal(0, 3, 500), [0.0, 0.0, 1e-15, -2.5, 1e30]])
    h = parse(run(tw.summary.histogram("h", values.astype(np.float64)))).value[0].histo
    assert (h.min, h.max, h.num) == (values.min(), values.max(), values.size)
    assert h.sum == pytest.approx(values.sum()) and h.sum_squares == pytest.approx((values ** 2).sum())
    assert list(zip(h.bucket_limit, h.bucket)) == _reference_histogram(values)
    assert sum(h.bucket) == values.size


def test_histogram_of_ints_and_of_nothing():
    h = parse(run(tw.summary.histogram("i", tw.constant([1, 2, 2], tw.int32)))).value[0].histo
    assert (h.num, h.sum, h.min, h.max) == (3, 5, 1, 2)
    empty = parse(run(tw.summary.histogram("e", tw.zeros([0])))).value[0].histo
    assert empty.num == 0 and list(empty.bucket) == [0.0]


def test_histogram_nan_fails_the_step_naming_the_node():
    x = tw.placeholder(tw.float32, [None])
    h = tw.summary.histogram("weights", x)
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"HistogramSummary node 'weights'.*NaN in summary histogram for: weights"):
        run(h, {x: [1.0, np.nan]})


# --- image -------------------------------------------------------------------------------------
def _png_pixels(encoded):
    Image = pytest.importorskip("PIL.Image")
    return np.asarray(Image.open(io.BytesIO(encoded)))


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_image_uint8_is_exact_png(channels):
    pix = np.random.RandomState(1).randint(0, 256, size=(2, 5, 7, channels)).astype(np.uint8)
    s = parse(run(tw.summary.image("pic", tw.constant(pix), max_outputs=5)))
    assert [v.tag for v in s.value] == ["pic/image/0", "pic/image/1"]
    for i, v in enumerate(s.value):
        assert (v.image.height, v.image.width, v.image.colorspace) == (5, 7, channels)
        got = _png_pixels(v.image.encoded_image_string)
        assert np.array_equal(got.reshape(pix[i].shape), pix[i])


def test_image_float_scaling_max_outputs_and_bad_color():
    imgs = np.zeros((3, 2, 2, 3), np.float32)
    imgs[0] = [[[0, 0.5, 1.0], [0.25, 0, 0]], [[1, 1, 1], [0, 0, 0]]]   # in [0, 1]: times 255
    imgs[1] = imgs[0] * 0.5                                              # max 0.5: scaled up to 255
    imgs[2] = [[[-1, 0, 1], [0.5, 0, 0]], [[np.nan, 0, 0], [0, 0, 0]]]  # negative: 0 -> 128
    s = parse(run(tw.summary.image("f", imgs, max_outputs=3)))
    p = [_png_pixels(v.image.encoded_image_string) for v in s.value]
    assert np.array_equal(p[0], (imgs[0] * 255).astype(np.uint8))
    assert np.array_equal(p[1], p[0])
    assert p[2][0, 0].tolist() == [1, 128, 255] and p[2][0, 1].tolist() == [191, 128, 128]
    assert p[2][1, 0].tolist() == [255, 0, 0]  # a non-finite pixel gets bad_color (red)
    one = parse(run(tw.summary.image("one", imgs, max_outputs=1)))
    assert [v.tag for v in one.value] == ["one/image"]


def test_png_encoder_round_trip_without_tensorweave():
    img = np.arange(4 * 3 * 3, dtype=np.uint8).reshape(4, 3, 3)
    assert np.array_equal(_png_pixels(summary_kernels.encode_png(img)), img)


# --- audio ---------------------------------------------------------------------------------------
def test_audio_is_wav():
    t = np.linspace(0, 1, 800, dtype=np.float32)
    clips = np.stack([np.sin(2 * np.pi * 5 * t), np.clip(2 * t - 1, -1, 1)])[:, :, None]  # [2, 800, 1]
    stereo = np.concatenate([clips, -clips], axis=2)
    s = parse(run(tw.summary.audio("snd", stereo, 8000, max_outputs=1)))
    (v,) = s.value
    assert v.tag == "snd/audio"
    a = v.audio
    assert (a.sample_rate, a.num_channels, a.length_frames, a.content_type) == (8000, 2, 800, "audio/wav")
    with wave.open(io.BytesIO(a.encoded_audio_string)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (2, 2, 8000, 800)
        pcm = np.frombuffer(w.readframes(800), "<i2").reshape(800, 2)
    assert np.abs(pcm / 32768.0 - stereo[0]).max() < 1e-4
    mono = parse(run(tw.summary.audio("m", clips[:, :, 0], 16000.0)))
    assert [v.tag for v in mono.value] == ["m/audio/0", "m/audio/1"] and mono.value[0].audio.num_channels == 1


# --- text and tensors -----------------------------------------------------------------------------
def test_text_and_tensor_summary():
    from tensorboard.util import tensor_util

    t = tw.summary.text("notes", tw.constant(["**hello**", "world"]))
    ts = tw.summary.tensor_summary("w", tw.constant([[1, 2], [3, 4]], tw.int64), summary_description="a matrix",
                                   display_name="W")
    txt, ten = (parse(x).value[0] for x in run([t, ts]))
    assert txt.metadata.plugin_data.plugin_name == "text"
    assert tensor_util.make_ndarray(txt.tensor).tolist() == [b"**hello**", b"world"]
    assert (ten.metadata.summary_description, ten.metadata.display_name) == ("a matrix", "W")
    arr = tensor_util.make_ndarray(ten.tensor)
    assert arr.dtype == np.int64 and arr.tolist() == [[1, 2], [3, 4]]


# --- placement and control flow ----------------------------------------------------------------------
def test_summary_of_an_accelerator_value_runs_on_the_cpu():
    register_fake_devices(count=1)
    x = tw.placeholder(tw.float32, [3])
    with tw.device(FAKE0):  # the summaries inside go to this task's CPU
        y = x * 2.0
        h = tw.summary.histogram("y", y)
        s = tw.summary.scalar("total", tw.reduce_sum(y))
    with tw.Session() as sess:
        placed = sess.placement([h, s], {x: None})
        out = sess.run([h, s], {x: [1, 2, 3]})
    assert "FAKE" in placed["Mul"] and "FAKE" in placed["Sum"]
    assert "CPU" in placed["y"] and "CPU" in placed["total"]
    assert parse(out[0]).value[0].histo.sum == 12.0 and parse(out[1]).value[0].simple_value == 12.0


def test_summary_inside_a_while_loop_body():
    register_fake_devices(count=1)

    def body(i, _):
        with tw.device(FAKE0):
            v = tw.cast(i, tw.float32) * 10.0
        return i + 1, tw.summary.scalar("v", v, collections=[])

    _, last = tw.while_loop(lambda i, _: i < 4, body, [tw.constant(0), tw.constant("")])
    (v,) = parse(run(last)).value
    assert (v.tag, v.simple_value) == ("while/v", 30.0)


# --- bad input -----------------------------------------------------------------------------------------
def test_scalar_of_a_vector_fails_at_construction():
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"ScalarSummary node 'loss'.*tags and values must have the same shape"):
        tw.summary.scalar("loss", tw.zeros([3]))
    assert tw.get_default_graph().get_operations()[-1].type != "ScalarSummary"


def test_scalar_of_a_vector_fed_at_run_time():
    x = tw.placeholder(tw.float32, None)
    s = tw.summary.scalar("loss", x)
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"ScalarSummary node 'loss'.*got tags \[\] and values \[2\]"):
        run(s, {x: [1.0, 2.0]})


def test_scalar_of_a_string_is_refused():
    with pytest.raises(tw.errors.InvalidArgumentError, match="must be real numeric"):
        tw.summary.scalar("s", tw.constant("x"))


@pytest.mark.parametrize("shape, match", [((4, 4, 3), "must be 4-D"), ((1, 4, 4, 2), "1 .grayscale., 3 .RGB. or 4"),
                                          ((1, 4, 4, 5), "got 5")])
def test_image_of_the_wrong_shape_fails_at_construction(shape, match):
    with pytest.raises(tw.errors.InvalidArgumentError, match=f"ImageSummary node 'img'.*{match}"):
        tw.summary.image("img", tw.zeros(shape))


def test_image_of_the_wrong_shape_fed_at_run_time():
    x = tw.placeholder(tw.float32, [None, None, None, None])
    s = tw.summary.image("img", x)
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"ImageSummary node 'img'.*got 2 .shape \[1, 2, 2, 2\]"):
        run(s, {x: np.zeros((1, 2, 2, 2), np.float32)})


def test_image_dtype_and_audio_shape_and_text_dtype():
    with pytest.raises(tw.errors.InvalidArgumentError, match="ImageSummary.*int32 is not allowed"):
        tw.summary.image("img", tw.zeros([1, 2, 2, 3], tw.int32))
    with pytest.raises(tw.errors.InvalidArgumentError, match="AudioSummaryV2 node 'a'.*2-D .batch_size, frames."):
        tw.summary.audio("a", tw.zeros([5]), 8000)
    with pytest.raises(tw.errors.InvalidArgumentError, match="must be a string tensor"):
        tw.summary.text("t", tw.zeros([2]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="inputs is empty"):
        tw.summary.merge([])


def test_audio_sample_rate_must_be_positive():
    s = tw.summary.audio("a", tw.zeros([1, 10]), tw.placeholder(tw.float32, [], name="rate"))
    with pytest.raises(tw.errors.InvalidArgumentError, match="AudioSummaryV2 node 'a'.*sample_rate must be a positive"):
        run(s, {"rate:0": 0.0})


def test_missing_tensorboard_is_a_clear_error(monkeypatch):
    from tensorweave.ops import summary_ops

    def no_tensorboard():
        raise ImportError("No module named 'tensorboard'")

    monkeypatch.setattr(summary_ops, "_import_protos", no_tensorboard)
    s = tw.summary.scalar("x", 1.0)  # building a scalar needs no protos ...
    with pytest.raises(tw.errors.FailedPreconditionError, match=r"ScalarSummary node 'x'.*pip install 'tensorweave\[tensorboard\]'"):
        run(s)  # ... running it does: the plan fails naming the node
    with pytest.raises(tw.errors.FailedPreconditionError, match=r"tw.summary.FileWriter: .*tensorweave\[tensorboard\]"):
        tw.summary.FileWriter("/nonexistent-never-created")
    with pytest.raises(tw.errors.FailedPreconditionError, match="tw.summary.Summary: the tensorboard package"):
        tw.summary.Summary  # noqa: B018


@pytest.mark.serial  # starts a cluster's servers (conftest.py)
def test_summaries_run_on_a_worker_task():
    """Summary ops go through the wire (the GraphDef a worker validates) and run on the
    worker's CPU; the tasks live in this process over the inproc transport."""
    from tensorweave.distributed.server import Server

    addrs = [f"inproc-host:{p}" for p in (53100, 53101)]
    spec = {"worker": addrs}
    servers = [Server(spec, "worker", i, transport="inproc") for i in range(2)]
    try:
        x = tw.placeholder(tw.float32, [None], name="x")
        with tw.device("/job:worker/task:1"):
            y = x * 3.0
            merged = tw.summary.merge([tw.summary.scalar("avg", tw.reduce_mean(y)), tw.summary.histogram("y", y),
                                       tw.summary.image("img", tw.reshape(y, [1, 1, -1, 1]), max_outputs=1)])
        with tw.Session(servers[0].target) as sess:
            placed = sess.placement(merged, {x: None})
            out = sess.run(merged, {x: [1.0, 2.0, 3.0]})
        assert placed["avg"] == placed["y"] == "/job:worker/replica:0/task:1/device:CPU:0"
        assert placed["Merge/MergeSummary"].startswith("/job:worker/replica:0/task:1")
        vals = {v.tag: v for v in parse(out).value}
        assert vals["avg"].simple_value == 6.0 and vals["y"].histo.sum == 18.0
        assert vals["img/image"].image.width == 3
    finally:
        for s in servers:
            s.stop()
