"""A partitioned embedding over two ps task processes (grpc): each shard lives on a ps task,
its rows are read there (the shard's Gather runs on its task), and SGD gives the same loss
trajectory as one unpartitioned variable in this process. A checkpoint written from the
cluster with 4 shards restores into 2 shards (on the cluster) and into 2 and 1 shards and an
unpartitioned variable locally. Processes are always reaped (LocalCluster); every step runs
with a deadline."""

import os

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.distributed.testing import LocalCluster

STEP = tw.RunOptions(timeout_in_ms=60000)
VOCAB, DIM, STEPS = 23, 4, 4

pytestmark = pytest.mark.skipif("grpc" not in dict(plugins.registry().transports.items()),
                                reason="the grpc transport (tensorweave-grpc) is not installed")


def _data():
    rng = np.random.default_rng(7)
    table = rng.standard_normal((VOCAB, DIM)).astype(np.float32)
    ids = rng.integers(0, VOCAB, size=(STEPS, 6, 2))
    targets = rng.standard_normal((STEPS, 6, 2, DIM)).astype(np.float32)
    return table, ids, targets


def _model(table, partitioner, name="emb"):
    """(embedding, ids placeholder, targets placeholder, loss, train op)."""
    emb = tw.get_variable(name, initializer=table, partitioner=partitioner)
    ids = tw.placeholder(tw.int64, [None, 2], name="ids")
    targets = tw.placeholder(tw.float32, [None, 2, DIM], name="targets")
    looked_up = tw.nn.embedding_lookup(emb, ids, partition_strategy="div", max_norm=3.0)
    loss = tw.reduce_mean(tw.square(looked_up - targets))
    train = tw.train.GradientDescentOptimizer(0.5).minimize(loss)
    return emb, ids, targets, loss, train


def _local_trajectory(table, ids, targets):
    with tw.Graph().as_default():
        emb, ids_t, targets_t, loss, train = _model(table, None)
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            losses = [sess.run([train, loss], {ids_t: ids[s], targets_t: targets[s]})[1] for s in range(STEPS)]
            return losses, sess.run(emb)


def _restored_locally(path, shards):
    with tw.Graph().as_default():
        partitioner = tw.fixed_size_partitioner(shards) if shards else None
        emb = tw.get_variable("emb", [VOCAB, DIM], partitioner=partitioner)
        saver = tw.train.Saver()
        with tw.Session() as sess:
            saver.restore(sess, path)
            return sess.run(tw.convert_to_tensor(emb))


def test_partitioned_embedding_on_two_ps_processes_matches_local(tmp_path):
    table, ids, targets = _data()
    want_losses, want_table = _local_trajectory(table, ids, targets)

    # The tasks save the checkpoint into tmp_path: their config allows it ([files] allow).
    with LocalCluster({"ps": 2, "worker": 1}, "grpc", extra={"files": {"allow": [str(tmp_path)]}}) as cluster:
        g = tw.Graph()
        with g.as_default():
            with tw.device(tw.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")):
                emb, ids_t, targets_t, loss, train = _model(table, tw.fixed_size_partitioner(4))
            whole = emb.as_tensor()
            saver = tw.train.Saver()
            init = tw.global_variables_initializer()
        assert [s.device for s in emb] == ["/job:ps/task:0", "/job:ps/task:1"] * 2
        with tw.Session(cluster.target, graph=g) as sess:
            feed = {ids_t: ids[0], targets_t: targets[0]}
            placement = sess.placement([train, loss], feed)
            reads = {s.value().op for s in emb}
            gathers = {op.name: placement[op.name] for op in g.get_operations()
                       if op.type == "GatherV2" and op.inputs[0].op in reads}
            # each shard is read on its own ps task: only the rows looked up travel
            assert len(gathers) == 4
            assert sorted(dev.split("/device:")[0] for dev in gathers.values()) == \
                ["/job:ps/replica:0/task:0"] * 2 + ["/job:ps/replica:0/task:1"] * 2
            sess.run(init, options=STEP)
            losses = [sess.run([train, loss], {ids_t: ids[s], targets_t: targets[s]}, options=STEP)[1]
                      for s in range(STEPS)]
            np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
            final = sess.run(whole, options=STEP)
            np.testing.assert_allclose(final, want_table, rtol=1e-5, atol=1e-6)
            path = saver.save(sess, os.path.join(tmp_path, "emb.ckpt"))

        # restore into 2 shards on the cluster (a new logical variable saved as "emb")
        g2 = tw.Graph()
        with g2.as_default():
            with tw.device(tw.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")):
                emb2 = tw.get_variable("emb_two", [VOCAB, DIM], partitioner=tw.fixed_size_partitioner(2))
            restorer = tw.train.Saver({"emb": emb2})
            whole2 = emb2.as_tensor()
        with tw.Session(cluster.target, graph=g2) as sess:
            restorer.restore(sess, path)
            np.testing.assert_array_equal(sess.run(whole2, options=STEP), final)

    assert tw.train.list_variables(path) == [("emb", [VOCAB, DIM])]
    for shards in (2, 1, 0):
        np.testing.assert_array_equal(_restored_locally(path, shards), final)
