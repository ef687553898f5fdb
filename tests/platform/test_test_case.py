"""tw.test: TestCase sessions, graphs and assertions, test.main, GPU queries, compute_gradient."""

import os
import subprocess
import sys
import textwrap
import unittest

import numpy as np
import pytest

import tensorweave as tw


class SessionsTest(tw.test.TestCase):
    def test_session_runs_on_a_fresh_default_graph_and_is_the_default_session(self):
        self.assertEqual(tw.get_default_graph().get_operations(), [])  # setUp reset the graph
        with self.session() as sess:
            self.assertIs(tw.get_default_session(), sess)
            x = tw.constant([1.0, 2.0])
            y = x * 2.0
            self.assertEqual(y.op.device, "/device:CPU:0")  # pinned to the CPU without use_gpu
            self.assertAllClose(y.eval(), [2.0, 4.0])
            self.assertAllClose(y, [2.0, 4.0])                 # a Tensor is evaluated
        self.assertIsNone(tw.get_default_session())

    def test_cached_session_is_reused_and_test_session_is_its_old_name(self):
        with self.cached_session() as a:
            pass
        with self.cached_session() as b, self.test_session() as c:
            self.assertIs(a, b)
            self.assertIs(b, c)
        with self.session() as d:
            self.assertIsNot(d, a)
        with self.assertRaises(tw.errors.InvalidArgumentError):
            with self.cached_session(graph=tw.Graph()):
                pass

    def test_test_session_with_another_graph_uses_that_graph(self):
        g = tw.Graph()
        with g.as_default():
            t = tw.constant(5)
        with self.test_session(graph=g) as sess:
            self.assertIs(sess.graph, g)
            self.assertEqual(self.evaluate(t), 5)

    def test_use_gpu_runs_without_a_gpu(self):
        with self.session(use_gpu=True):
            self.assertAllEqual(tw.constant([1, 2]) + 1, [2, 3])

    def test_evaluate_without_a_session_uses_the_cached_one(self):
        self.assertEqual(self.evaluate({"v": tw.constant(3.0)}), {"v": 3.0})

    def test_get_temp_dir_is_a_directory_per_test(self):
        d = self.get_temp_dir()
        self.assertTrue(os.path.isdir(d))
        self.assertEqual(d, self.get_temp_dir())
        self.assertTrue(d.startswith(tw.test.get_temp_dir()))


class AssertionsTest(tw.test.TestCase):
    def test_assert_all_close(self):
        self.assertAllClose([1.0, 2.0], np.array([1.0, 2.0 + 1e-7]))
        self.assertAllClose({"a": [1.0], "b": (2.0, [3.0, 4.0])}, {"a": [1.0], "b": (2.0, [3.0, 4.0])})
        self.assertAllClose(np.float32(1.0), 1.0)
        self.assertAllClose([np.nan, 1.0], [np.nan, 1.0])
        self.assertAllClose([1.0, 2.0], [1.1, 2.0], rtol=0.1)
        with self.assertRaises(AssertionError):
            self.assertAllClose([1.0, 2.0], [1.0, 2.1])
        with self.assertRaisesRegex(AssertionError, "Shape mismatch"):
            self.assertAllClose([1.0, 2.0], [[1.0, 2.0]])
        with self.assertRaisesRegex(AssertionError, "Can't compare a dict"):
            self.assertAllClose({"a": 1.0}, [1.0])
        with self.assertRaisesRegex(AssertionError, "mismatched keys"):
            self.assertAllClose({"a": 1.0}, {"b": 1.0})
        with self.assertRaisesRegex(AssertionError, "Mismatched length"):
            self.assertAllClose([1.0, [2.0, 3.0]], [1.0, [2.0, 3.0], 4.0])

    def test_assert_all_equal(self):
        self.assertAllEqual([[1, 2]], np.array([[1, 2]]))
        self.assertAllEqual([np.nan], [np.nan])
        with self.assertRaises(AssertionError):
            self.assertAllEqual([1, 2], [1, 3])
        with self.assertRaisesRegex(AssertionError, "Shape mismatch"):
            self.assertAllEqual([1, 2], [[1, 2]])

    def test_assert_all_close_according_to_type(self):
        a = np.array([1.0], np.float32)
        self.assertAllCloseAccordingToType(a, a + 5e-7)
        with self.assertRaises(AssertionError):
            self.assertAllCloseAccordingToType(a.astype(np.float64), a.astype(np.float64) + 5e-5)
        h = np.array([1.0], np.float16)
        self.assertAllCloseAccordingToType(h, h + np.float16(5e-4))
        self.assertAllCloseAccordingToType(a, a + 5e-5, float_rtol=1e-4, float_atol=1e-4)

    def test_assert_shape_equal_and_friends(self):
        x = tw.placeholder(tw.float32, [2, 3])
        self.assertShapeEqual(np.zeros((2, 3)), x)
        with self.assertRaises(AssertionError):
            self.assertShapeEqual(np.zeros((3, 2)), x)
        with self.assertRaises(TypeError):
            self.assertShapeEqual([1, 2], x)
        self.assertNear(1.0, 1.05, 0.1)
        self.assertArrayNear([1.0, 2.0], [1.01, 1.99], 0.02)
        self.assertNDArrayNear(np.ones(3), np.ones(3) + 1e-4, 1e-3)
        self.assertAllGreater([2, 3], 1)
        self.assertAllLess([2, 3], 4)
        self.assertAllGreaterEqual([2, 3], 2)
        self.assertAllLessEqual([2, 3], 3)
        self.assertAllInRange([0.0, 0.5, 1.0], 0.0, 1.0)
        with self.assertRaisesRegex(AssertionError, "outside the range"):
            self.assertAllInRange([0.0, 1.0], 0.0, 1.0, open_upper_bound=True)
        self.assertAllInSet([1, 2, 1], {1, 2})
        with self.assertRaisesRegex(AssertionError, r"\[3\]"):
            self.assertAllInSet([1, 3], {1, 2})
        self.assertDTypeEqual(np.zeros(2, np.float32), tw.float32)

    def test_assert_raises_op_error(self):
        with self.session():
            with self.assertRaisesOpError("must be a scalar|shape"):
                tw.reshape(tw.constant([1, 2, 3]), [2]).eval()
            with self.assertRaises(AssertionError):
                with self.assertRaisesOpError("no such message"):
                    tw.reshape(tw.constant([1, 2, 3]), [2]).eval()


def test_testcase_starts_each_test_on_a_fresh_graph_and_seeds_numpy():
    seen = []

    class T(tw.test.TestCase):
        def test_a(self):
            tw.constant(1.0, name="only")
            seen.append((len(tw.get_default_graph().get_operations()), np.random.rand()))

        def test_b(self):
            tw.constant(1.0, name="only")
            seen.append((len(tw.get_default_graph().get_operations()), np.random.rand()))

    result = unittest.TextTestRunner(stream=open(os.devnull, "w")).run(unittest.defaultTestLoader.loadTestsFromTestCase(T))
    assert result.wasSuccessful()
    assert seen[0] == seen[1] and seen[0][0] == 1


def test_compute_gradient_matches_numerical():
    x = tw.placeholder(tw.float64, [2, 3])
    y = tw.reduce_sum(tw.square(x) * tw.constant([[1.0, 2.0, 3.0]], tw.float64), axis=1)
    x0 = np.arange(6, dtype=np.float64).reshape(2, 3)
    with tw.Session().as_default():
        theoretical, numerical = tw.test.compute_gradient(x, [2, 3], y, [2], x_init_value=x0)
        assert theoretical.shape == (6, 2)
        expected = np.zeros((6, 2))
        expected[:3, 0] = 2 * x0[0] * [1, 2, 3]
        expected[3:, 1] = 2 * x0[1] * [1, 2, 3]
        np.testing.assert_allclose(theoretical, expected)
        np.testing.assert_allclose(numerical, expected, atol=1e-6)
        assert tw.test.compute_gradient_error(x, [2, 3], y, [2]) < 1e-6
        pairs = tw.test.compute_gradient([x], [[2, 3]], y, [2], x_init_value=[x0])
        assert isinstance(pairs, list) and len(pairs) == 1
    with pytest.raises(tw.errors.FailedPreconditionError, match="default session"):
        tw.test.compute_gradient(x, [2, 3], y, [2])


def test_gpu_queries_agree_with_the_devices_there_are():
    devices = [d.device_type for d in tw.list_devices()]
    assert tw.test.is_gpu_available() == ("GPU" in devices)
    assert tw.test.gpu_device_name() == ("/device:GPU:0" if "GPU" in devices else "")
    assert isinstance(tw.test.is_built_with_cuda(), bool)


def test_test_main_runs_the_main_module_tests_and_exits_with_their_status(tmp_path):
    program = textwrap.dedent("""
        import tensorweave as tf

        class SquareTest(tf.test.TestCase):
            def testSquare(self):
                with self.session():
                    self.assertAllEqual(tf.square([2, 3]).eval(), [4, 9])

            def testClose(self):
                self.assertAllClose([1.0], [EXPECTED])

        if __name__ == "__main__":
            tf.test.main()
    """)

    def run(expected):
        script = tmp_path / f"square_test_{expected}.py"
        script.write_text(program.replace("EXPECTED", expected))
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)

    good = run("1.0")
    assert good.returncode == 0 and "Ran 2 tests" in good.stderr and "OK" in good.stderr, good.stderr
    bad = run("2.0")
    assert bad.returncode == 1 and "FAILED (failures=1)" in bad.stderr and "testClose" in bad.stderr
