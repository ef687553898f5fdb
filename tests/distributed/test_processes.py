"""The distributed runtime with real task processes on loopback (one process per task),
over every network transport: the same graph split across two worker processes and a ps
gives the same values as a local Session. Processes are always reaped (LocalCluster)."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.distributed.testing import LocalCluster

NETWORK = sorted(n for n, _ in plugins.registry().transports.items() if n != "inproc")


@pytest.mark.parametrize("transport", NETWORK)
def test_graph_split_across_worker_processes_matches_local(transport):
    rng = np.random.default_rng(0)
    w1v, w2v = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    xv = rng.standard_normal((5, 8)).astype(np.float32)

    def build(distributed):
        g = tw.Graph()
        with g.as_default():
            x = tw.placeholder(tw.float32, [None, 8], name="x")
            with tw.device("/job:ps/task:0" if distributed else None):
                w1, w2 = tw.Variable(w1v, name="w1"), tw.Variable(w2v, name="w2")
            with tw.device("/job:worker/task:0" if distributed else None):
                h = tw.nn.relu(tw.matmul(x, w1))
            with tw.device("/job:worker/task:1" if distributed else None):
                y = tw.nn.softmax(tw.matmul(h, w2))
                loss = tw.reduce_mean(-tw.log(y[:, 0]))
            grads = tw.gradients(loss, [w1, w2])
            init = tw.global_variables_initializer()
        return g, x, [h, y, loss] + grads, init

    g, x, fetches, init = build(False)
    with tw.Session(graph=g) as sess:
        sess.run(init)
        expected = sess.run(fetches, {x: xv})

    with LocalCluster({"ps": 1, "worker": 2}, transport) as cluster:
        g, x, fetches, init = build(True)
        with tw.Session(cluster.target, graph=g) as sess:
            placement = sess.placement(fetches, {x: xv})
            tasks = {name.split("/device:")[0] for name in placement.values()}
            assert {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0",
                    "/job:worker/replica:0/task:1"} <= tasks
            sess.run(init)
            for _ in range(2):
                got = sess.run(fetches, {x: xv}, options=tw.RunOptions(timeout_in_ms=60000))
                for a, b in zip(got, expected):
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
