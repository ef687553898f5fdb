"""tw.contrib: layers (TF1 variable names, initializers, regularizers, optimize_loss),
framework (arg_scope, variables, global step), learn.datasets (MNIST from local files),
and clear errors for what is not provided."""

import gzip
import os

import numpy as np
import pytest

import tensorweave as tw

layers = tw.contrib.layers
rng = np.random.RandomState(2)


# ---------------------------------------------------------------------------------------
# layers
def test_fully_connected_creates_tf1_model_variables(sess):
    # its own seed: the module's `rng` gives data that depends on which tests ran before
    x = tw.constant(np.random.RandomState(7).randn(4, 3).astype(np.float32))
    h = layers.fully_connected(x, 5)                   # relu by default
    y = layers.fully_connected(h, 2, activation_fn=None, scope="out")
    z = layers.linear(tw.ones([2, 3, 4]), 6)           # rank 3: over the last axis
    names = [v.op.name for v in tw.global_variables()]
    assert names == ["fully_connected/weights", "fully_connected/biases", "out/weights", "out/biases",
                     "fully_connected_1/weights", "fully_connected_1/biases"]
    assert tw.contrib.framework.get_model_variables() == tw.global_variables()
    assert z.shape.as_list() == [2, 3, 6]
    sess.run(tw.global_variables_initializer())
    w, b, hv, yv = sess.run([tw.global_variables()[0], tw.global_variables()[1], h, y])
    np.testing.assert_allclose(hv, np.maximum(sess.run(x) @ w + b, 0), rtol=1e-5)
    # no activation on "out": with weights of -1 its outputs are negative wherever h is not 0
    sess.run(tw.global_variables()[2].assign(-np.ones((5, 2), np.float32)))
    hv, yv = sess.run([h, y])
    assert hv.any()
    np.testing.assert_allclose(yv, -hv.sum(axis=1, keepdims=True) * np.ones((1, 2)), rtol=1e-5)
    assert yv.shape == (4, 2) and (yv < 0).any()


def test_fully_connected_options(sess):
    x = tw.constant(np.ones((2, 3), np.float32))
    y = layers.fully_connected(x, 4, biases_initializer=None, weights_initializer=tw.ones_initializer(),
                               variables_collections={"weights": ["my_weights"]}, outputs_collections="outs",
                               normalizer_fn=lambda t, scale: t * scale, normalizer_params={"scale": 2.0},
                               activation_fn=tw.nn.relu, scope="fc")
    assert [v.op.name for v in tw.global_variables()] == ["fc/weights"]   # a normalizer replaces biases
    assert tw.get_collection("my_weights") == tw.global_variables() and tw.get_collection("outs") == [y]
    sess.run(tw.global_variables_initializer())
    np.testing.assert_allclose(sess.run(y), np.full((2, 4), 6.0))
    with tw.variable_scope("fc", reuse=True):
        assert tw.get_variable("weights") is tw.global_variables()[0]
    layers.fully_connected(x, 4, biases_initializer=None, reuse=True, scope="fc")   # shares fc/weights
    assert len(tw.global_variables()) == 1


def test_conv2d_pooling_flatten_dropout(sess):
    img = tw.constant(np.random.RandomState(3).rand(2, 8, 8, 3).astype(np.float32))  # not the shared `rng`
    h = layers.conv2d(img, 6, [3, 3])                    # SAME, stride 1, relu
    p = layers.max_pool2d(h, [2, 2])                     # VALID, stride 2
    a = layers.avg_pool2d(h, 2, stride=2)
    f = layers.flatten(p)
    d = layers.dropout(f, keep_prob=0.5, is_training=False)
    d_train = layers.dropout(f, keep_prob=0.5, seed=1)
    seq = layers.conv2d(tw.ones([2, 10, 3]), 4, 3, stride=2, scope="conv1d")   # 1-D on NWC
    assert [v.op.name for v in tw.trainable_variables()][:2] == ["Conv/weights", "Conv/biases"]
    assert tw.trainable_variables()[0].shape.as_list() == [3, 3, 3, 6]
    assert h.shape.as_list() == [2, 8, 8, 6] and p.shape.as_list() == [2, 4, 4, 6]
    assert a.shape.as_list() == [2, 4, 4, 6] and f.shape.as_list() == [2, 96] and seq.shape.as_list() == [2, 5, 4]
    sess.run(tw.global_variables_initializer())
    hv, pv, fv, dv, dt = sess.run([h, p, f, d, d_train])
    assert (hv >= 0).all()
    np.testing.assert_allclose(pv, hv.reshape(2, 4, 2, 4, 2, 6).max(axis=(2, 4)))
    np.testing.assert_allclose(dv, fv)                  # not training: identity
    # where the ReLU gave 0 dropout's output is 0 whether kept or not: count the others
    live = fv != 0
    kept = dt != 0
    assert live.sum() >= 20 and 0.2 < kept[live].mean() < 0.8 and np.allclose(dt[kept], 2 * fv[kept])


def test_conv2d_nchw_and_transpose(sess):
    x = rng.rand(1, 2, 5, 5).astype(np.float32)
    nchw = layers.conv2d(tw.constant(x), 3, 3, data_format="NCHW", activation_fn=None, scope="c")
    nhwc = tw.nn.conv2d(tw.constant(x.transpose(0, 2, 3, 1)), tw.get_default_graph().get_tensor_by_name(
        "c/weights:0"), [1, 1, 1, 1], "SAME")
    up = layers.conv2d_transpose(tw.ones([1, 3, 3, 2]), 4, 3, stride=2)
    assert nchw.shape.as_list() == [1, 3, 5, 5] and up.shape.as_list() == [1, 6, 6, 4]
    assert tw.get_default_graph().get_tensor_by_name("Conv2d_transpose/weights:0").shape.as_list() == [3, 3, 4, 2]
    sess.run(tw.global_variables_initializer())
    a, b = sess.run([nchw, nhwc])
    np.testing.assert_allclose(a, b.transpose(0, 3, 1, 2), rtol=1e-5, atol=1e-6)


def test_one_hot_and_not_provided_layers(sess):
    np.testing.assert_array_equal(sess.run(layers.one_hot_encoding(tw.constant([0, 2]), 3)),
                                  [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(NotImplementedError, match="layer_norm is not provided"):
        layers.layer_norm(tw.ones([2, 3]))
    with pytest.raises(AttributeError, match="tf.contrib.layers.embed_sequence is not provided by tensorweave"):
        layers.embed_sequence  # noqa: B018


def test_layer_bad_input():
    with pytest.raises(tw.errors.InvalidArgumentError, match="num_outputs must be a positive int"):
        layers.fully_connected(tw.ones([2, 3]), 0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="inputs must have rank at least 2"):
        layers.fully_connected(tw.ones([3]), 2)
    with pytest.raises(tw.errors.InvalidArgumentError, match="padding must be 'SAME' or 'VALID'"):
        layers.conv2d(tw.ones([1, 4, 4, 1]), 2, 3, padding="full")
    with pytest.raises(tw.errors.InvalidArgumentError, match="keep_prob must be a float in"):
        layers.dropout(tw.ones([2, 2]), keep_prob=0.0)


# ---------------------------------------------------------------------------------------
# initializers and regularizers
@pytest.mark.parametrize("init,limit_or_std,uniform", [
    (layers.xavier_initializer(seed=1), np.sqrt(6.0 / (200 + 300)), True),
    (layers.xavier_initializer(uniform=False, seed=1), np.sqrt(1.3 * 2.0 / (200 + 300)), False),
    (layers.variance_scaling_initializer(seed=1), np.sqrt(1.3 * 2.0 / 200), False),
    (layers.variance_scaling_initializer(factor=1.0, mode="FAN_OUT", uniform=True, seed=1), np.sqrt(3.0 / 300),
     True),
], ids=["xavier", "xavier_normal", "he", "fan_out_uniform"])
def test_initializers_follow_contrib_formulas(init, limit_or_std, uniform, sess):
    v = sess.run(init([200, 300]))
    if uniform:
        assert np.abs(v).max() <= limit_or_std and np.abs(v).max() > 0.95 * limit_or_std
        np.testing.assert_allclose(v.std(), limit_or_std / np.sqrt(3), rtol=0.03)
    else:   # a normal truncated at two standard deviations
        assert np.abs(v).max() <= 2 * limit_or_std
        np.testing.assert_allclose(v.std(), 0.8796 * limit_or_std, rtol=0.03)
    conv = sess.run(layers.xavier_initializer_conv2d(seed=2)([3, 3, 16, 32]))
    assert np.abs(conv).max() <= np.sqrt(6.0 / (9 * 16 + 9 * 32))
    with pytest.raises(TypeError, match="unknown mode"):
        layers.variance_scaling_initializer(mode="fan_in")
    with pytest.raises(TypeError, match="non-floating"):
        layers.xavier_initializer(dtype=tw.int32)


def test_regularizers(sess):
    w = tw.constant([[1.0, -2.0], [3.0, 0.0]])
    l1, l2 = layers.l1_regularizer(0.5)(w), layers.l2_regularizer(0.1)(w)
    both = layers.l1_l2_regularizer(0.5, 0.1)(w)
    summed = layers.sum_regularizer([layers.l1_regularizer(0.5), None, layers.l2_regularizer(0.1)])(w)
    assert layers.l2_regularizer(0.0)(w) is None and layers.sum_regularizer([])(w) is None
    assert l2.op.name == "l2_regularizer"
    got = sess.run([l1, l2, both, summed])
    np.testing.assert_allclose(got, [3.0, 0.7, 3.7, 3.7], rtol=1e-6)
    with pytest.raises(tw.errors.InvalidArgumentError, match="scale cannot be an integer"):
        layers.l2_regularizer(1)
    with pytest.raises(tw.errors.InvalidArgumentError, match="scale must be >= 0.0"):
        layers.l1_regularizer(-0.1)


def test_apply_regularization(sess):
    a, b = tw.Variable([1.0, 1.0]), tw.Variable([2.0])
    with pytest.raises(tw.errors.InvalidArgumentError, match="no weights to regularize"):
        layers.apply_regularization(layers.l2_regularizer(1.0))   # the "weights" collection is empty
    total = layers.apply_regularization(layers.l2_regularizer(1.0), [a, b])
    assert tw.losses.get_regularization_losses() == [total]
    tw.add_to_collection("weights", a)
    only_a = layers.apply_regularization(layers.l1_regularizer(1.0))
    sess.run(tw.global_variables_initializer())
    assert sess.run(total) == pytest.approx(3.0) and sess.run(only_a) == pytest.approx(2.0)


# ---------------------------------------------------------------------------------------
# optimize_loss
def _regression():
    x = tw.constant(rng.randn(32, 3).astype(np.float32))
    y = tw.matmul(x, tw.constant([[1.0], [-2.0], [0.5]]))
    pred = layers.fully_connected(x, 1, activation_fn=None)
    return tw.losses.mean_squared_error(y, pred)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam", "Adagrad", "Momentum", "RMSProp",
                                       tw.train.AdamOptimizer, tw.train.GradientDescentOptimizer(0.1),
                                       lambda lr: tw.train.MomentumOptimizer(lr, 0.5)])
def test_optimize_loss_trains_with_every_kind_of_optimizer(optimizer, sess):
    loss = _regression()
    step = tw.train.get_or_create_global_step()
    train_op = layers.optimize_loss(loss, step, learning_rate=0.1, optimizer=optimizer,
                                    summaries=["loss", "learning_rate", "gradients", "gradient_norm"])
    assert tw.get_default_graph().get_tensor_by_name("OptimizeLoss/learning_rate:0") is not None
    sess.run(tw.global_variables_initializer())
    first = sess.run(loss)
    for _ in range(40):
        last = sess.run(train_op)           # the loss, after the update ran
    assert last < 0.5 * first and sess.run(step) == 40
    tags = sorted(s.op.name for s in tw.get_collection(tw.GraphKeys.SUMMARIES))
    # (the learning-rate summary is "learning_rate_1": the variable holds the name, as in TF1)
    assert tags == ["OptimizeLoss/global_norm/gradient_norm", "OptimizeLoss/gradient_norm/fully_connected/biases",
                    "OptimizeLoss/gradient_norm/fully_connected/weights",
                    "OptimizeLoss/gradients/fully_connected/biases", "OptimizeLoss/gradients/fully_connected/weights",
                    "OptimizeLoss/learning_rate_1", "OptimizeLoss/loss"]


def test_optimize_loss_clipping_decay_update_ops_and_no_step_increment(sess):
    loss = _regression()
    step = tw.train.get_or_create_global_step()
    counter = tw.Variable(0, name="updates", trainable=False)
    tw.add_to_collection(tw.GraphKeys.UPDATE_OPS, tw.assign_add(counter, 1))
    decayed = []
    train_op = layers.optimize_loss(
        loss, None, learning_rate=0.1, optimizer="SGD", clip_gradients=0.01, increment_global_step=False,
        learning_rate_decay_fn=lambda lr, gs: decayed.append(gs) or lr * 0.5, summaries=[])
    assert decayed == [step]                 # global_step None: the graph's global step
    sess.run(tw.global_variables_initializer())
    w = tw.contrib.framework.get_variables_by_name("weights")[0]
    before = sess.run(w)
    sess.run(train_op)
    # clipped to a global norm of 0.01, then a step of lr 0.05
    moved = np.linalg.norm(sess.run(w) - before) ** 2 + np.linalg.norm(sess.run(
        tw.contrib.framework.get_variables_by_name("biases")[0])) ** 2
    assert np.sqrt(moved) == pytest.approx(0.05 * 0.01, rel=1e-3)
    assert sess.run(counter) == 1 and sess.run(step) == 0


def test_optimize_loss_bad_input():
    loss = _regression()
    with pytest.raises(tw.errors.InvalidArgumentError, match="unknown optimizer 'Sgd'"):
        layers.optimize_loss(loss, None, 0.1, "Sgd")
    with pytest.raises(tw.errors.UnimplementedError, match="'Ftrl' optimizer is not provided"):
        layers.optimize_loss(loss, None, 0.1, "Ftrl")
    with pytest.raises(tw.errors.InvalidArgumentError, match="summaries must be a subset"):
        layers.optimize_loss(loss, None, 0.1, "SGD", summaries=["weights"])
    with pytest.raises(tw.errors.InvalidArgumentError, match="learning_rate should be a float"):
        layers.optimize_loss(loss, None, "fast", "SGD")
    with pytest.raises(tw.errors.InvalidArgumentError, match="learning_rate is required"):
        layers.optimize_loss(loss, None, None, "SGD")
    with pytest.raises(tw.errors.InvalidArgumentError, match="the loss must be a scalar"):
        layers.optimize_loss(tw.ones([2]), None, 0.1, "SGD")
    with pytest.raises(tw.errors.InvalidArgumentError, match="clip_gradients must be a float or a function"):
        layers.optimize_loss(loss, None, 0.1, "SGD", clip_gradients="yes")


# ---------------------------------------------------------------------------------------
# framework
def test_arg_scope_sets_defaults_and_nests(sess):
    fw = tw.contrib.framework
    x = tw.ones([2, 3])
    with fw.arg_scope([layers.fully_connected], activation_fn=None, weights_initializer=tw.ones_initializer()) as sc:
        a = layers.fully_connected(x, 2)
        with fw.arg_scope([layers.fully_connected, layers.conv2d], activation_fn=tw.nn.relu):
            b = layers.fully_connected(x - 10.0, 2)
        c = layers.fully_connected(x - 10.0, 2, activation_fn=tw.nn.relu6)   # the call wins
    with fw.arg_scope(sc):
        d = layers.fully_connected(x - 10.0, 2)
    e = layers.fully_connected(x, 2)            # outside: TF1's defaults again (relu, xavier)
    sess.run(tw.global_variables_initializer())
    av, bv, cv, dv = sess.run([a, b, c, d])
    np.testing.assert_allclose(av, 3.0)
    np.testing.assert_allclose(bv, 0.0)
    np.testing.assert_allclose(cv, 0.0)
    np.testing.assert_allclose(dv, -27.0)
    assert (sess.run(e) >= 0).all()
    with pytest.raises(tw.errors.InvalidArgumentError, match="not decorated with @add_arg_scope"):
        with fw.arg_scope([tw.layers.dense], units=3):
            pass

    @fw.add_arg_scope
    def mine(v, scale=1):
        return v * scale
    with fw.arg_scope([mine], scale=3):
        assert mine(2) == 6 and mine(2, scale=4) == 8
    assert fw.has_arg_scope(mine) and "scale" in fw.arg_scoped_arguments(mine)


def test_framework_variables_and_global_step():
    fw = tw.contrib.framework
    assert fw.get_global_step() is None
    step = fw.get_or_create_global_step()
    assert fw.get_or_create_global_step() is step and fw.get_global_step() is step
    with tw.variable_scope("net"):
        w = fw.model_variable("w", [2], initializer=tw.zeros_initializer())
        v = fw.variable("v", [1])
    loc = tw.Variable(0.0, collections=[tw.GraphKeys.LOCAL_VARIABLES], name="loc")
    assert fw.get_model_variables() == [w] and fw.get_variables("net") == [w, v]
    assert fw.get_variables_by_name("v") == [v] and fw.get_variables(suffix="w") == [w]
    assert fw.get_trainable_variables("net") == [w, v] and fw.get_local_variables() == [loc]
    assert fw.get_unique_variable("net/v") is v
    assert fw.get_variables_to_restore(exclude=["net/v"]) == [step, w]
    assert fw.get_variables_to_restore(include=["net"]) == [w, v]
    with tw.variable_scope("net") as scope:
        assert fw.get_variables(scope) == [w, v]


# ---------------------------------------------------------------------------------------
# learn.datasets
def _write_idx(path, array, magic):
    header = np.array([magic, *array.shape], ">u4").tobytes()
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def mnist_dir(tmp_path):
    images = rng.randint(0, 256, size=(30, 28, 28)).astype(np.uint8)
    labels = np.arange(30) % 10
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", images, 2051)
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels, 2049)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images[:7], 2051)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels[:7], 2049)
    return tmp_path, images, labels


def test_mnist_reads_the_standard_files(mnist_dir):
    path, images, labels = mnist_dir
    mnist = tw.contrib.learn.datasets.mnist.read_data_sets(str(path), one_hot=True, validation_size=10, seed=3)
    assert (mnist.train.num_examples, mnist.validation.num_examples, mnist.test.num_examples) == (20, 10, 7)
    assert mnist.train.images.shape == (20, 784) and mnist.train.images.dtype == np.float32
    np.testing.assert_allclose(mnist.validation.images, images[:10].reshape(10, 784) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(mnist.test.labels.argmax(1), labels[:7])
    raw = tw.contrib.learn.datasets.mnist.read_data_sets(str(path), dtype=tw.uint8, reshape=False,
                                                              validation_size=5)
    assert raw.train.images.shape == (25, 28, 28, 1) and raw.train.images.dtype == np.uint8
    np.testing.assert_array_equal(raw.train.labels, labels[5:])


def test_next_batch_walks_epochs_and_reshuffles(mnist_dir):
    path, _, _ = mnist_dir
    train = tw.contrib.learn.datasets.mnist.read_data_sets(str(path), validation_size=0, seed=1).train
    seen = []
    for _ in range(3):                    # 3 batches of 8 from 30: the third crosses into epoch 2
        xs, ys = train.next_batch(8)
        assert xs.shape == (8, 784) and ys.shape == (8,)
        seen.append(ys)
    assert train.epochs_completed == 0
    xs, ys = train.next_batch(8)          # 24..30 then 2 of the next epoch
    assert train.epochs_completed == 1 and len(ys) == 8
    first_epoch = np.concatenate(seen + [ys[:6]])
    assert sorted(first_epoch.tolist()) == sorted((np.arange(30) % 10).tolist())   # each example once
    in_order = tw.contrib.learn.datasets.mnist.read_data_sets(str(path), validation_size=0).train
    _, ys = in_order.next_batch(5, shuffle=False)
    np.testing.assert_array_equal(ys, [0, 1, 2, 3, 4])
    fake = tw.contrib.learn.datasets.mnist.read_data_sets("unused", fake_data=True, one_hot=True)
    fx, fy = fake.train.next_batch(2, fake_data=True)
    assert np.shape(fx) == (2, 784) and fy[0] == [1] + [0] * 9


def test_missing_mnist_says_what_to_download_and_where(tmp_path):
    with pytest.raises(tw.errors.NotFoundError) as e:
        tw.contrib.learn.datasets.mnist.read_data_sets(str(tmp_path / "MNIST_data"))
    msg = str(e.value)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                 "t10k-labels-idx1-ubyte.gz", "https://storage.googleapis.com/cvdf-datasets/mnist/",
                 os.path.join(str(tmp_path), "MNIST_data"), "does not download"):
        assert name in msg


def test_corrupt_mnist_file(mnist_dir):
    path, images, _ = mnist_dir
    _write_idx(path / "train-labels-idx1-ubyte.gz", images[:3], 2051)   # an image file under a label name
    with pytest.raises(tw.errors.InvalidArgumentError, match="invalid magic number 2051 in MNIST label file"):
        tw.contrib.learn.datasets.mnist.read_data_sets(str(path))


def test_iris_from_scikit_learn_and_load_dataset():
    pytest.importorskip("sklearn")
    iris = tw.contrib.learn.datasets.load_dataset("iris")
    assert iris.data.shape == (150, 4) and iris.data.dtype == np.float32 and set(iris.target) == {0, 1, 2}
    with pytest.raises(ValueError, match="'boston' is not provided"):
        tw.contrib.learn.datasets.load_dataset("boston")


# ---------------------------------------------------------------------------------------
# what is not provided
def test_unprovided_contrib_names_fail_clearly():
    with pytest.raises(AttributeError, match=r"tf.contrib.slim is not provided by tensorweave"):
        tw.contrib.slim  # noqa: B018
    with pytest.raises(ModuleNotFoundError, match=r"tf.contrib.slim is not provided by tensorweave"):
        import tensorweave.contrib.slim  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match=r"tf.contrib.keras is not provided"):
        from tensorweave.contrib import keras  # noqa: F401
    assert tw.contrib.rnn.BasicLSTMCell is tw.nn.rnn_cell.BasicLSTMCell
    assert tw.contrib.rnn.static_rnn is tw.nn.static_rnn
    with pytest.raises(AttributeError, match=r"tf.contrib.rnn.AttentionCellWrapper is not provided by tensorweave"):
        tw.contrib.rnn.AttentionCellWrapper  # noqa: B018
    with pytest.raises(AttributeError, match="tf.contrib.learn.DNNClassifier is not provided"):
        tw.contrib.learn.DNNClassifier  # noqa: B018
