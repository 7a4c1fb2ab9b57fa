"""if_else, for_loop and while_loop with Python bodies."""
import numpy as np
import pytest

import tgraph as tg


def test_if_else_picks_a_branch_at_run_time(rng):
    g = tg.Graph()
    x = g.placeholder([3], tg.f32, "x")
    p = g.placeholder([], tg.bool_, "p")
    (y,) = g.if_else(p, lambda: [x * 2], lambda: [g.neg(x)])
    exe = g.compile([x, p], [y], device="cpu")
    a = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(exe.run([a, np.array(True)])[0], a * 2)
    np.testing.assert_allclose(exe.run([a, np.array(False)])[0], -a)


def test_for_loop_sums_and_counts():
    g = tg.Graph()
    n = g.placeholder([], tg.i32, "n")
    total, fact = g.for_loop(n, [g.scalar(0, tg.i32), g.scalar(1, tg.f64)],
                             lambda i, s, f: [s + i, f * g.cast(i + 1, tg.f64)])
    exe = g.compile([n], [total, fact], device="cpu")
    for k in (0, 1, 6):
        s, f = exe.run([np.array(k, np.int32)])
        assert s == k * (k - 1) // 2 and f == np.prod(np.arange(1, k + 1))
    (evens,) = g.for_loop(2, 11, 3, [g.scalar(0, tg.i32)], lambda i, s: [s + i])  # 2 + 5 + 8
    assert g.run({}, evens) == 15


def test_while_loop_newton_sqrt(rng):
    g = tg.Graph()
    a = g.placeholder([5], tg.f32, "a")

    def before(x, it):
        err = g.reduce_max(g.abs(x * x - a) / a)
        return g.logical_and(err > 1e-6, it < 50), [x, it]

    def after(x, it):
        return [0.5 * (x + a / x), it + 1]

    x, iters = g.while_loop([a + 0.0, g.scalar(0, tg.i32)], before, after)
    v = rng.uniform(1, 100, 5).astype(np.float32)
    got, n = g.compile([a], [x, iters], device="cpu").run([v])
    np.testing.assert_allclose(got, np.sqrt(v), rtol=1e-5)
    assert 0 < n < 50


def test_nested_bodies_use_the_outer_graph_and_outer_values():
    g = tg.Graph()
    x = g.placeholder([], tg.f32, "x")
    scale = x * 10  # an outer value read inside both bodies

    def outer_body(i, acc):
        even = g.equal(i % 2, g.scalar(0, tg.i32))
        (inc,) = g.if_else(even, lambda: [scale], lambda: [g.neg(x)])
        return [acc + inc]

    (y,) = g.for_loop(4, [g.scalar(0, tg.f32)], outer_body)
    assert g.run({x: np.float32(1.5)}, y) == 2 * 15 - 2 * 1.5


def test_body_errors_are_reported_not_crashes():
    import pytest
    g = tg.Graph()
    p = g.placeholder([], tg.bool_, "p")
    x = g.placeholder([2], tg.f32, "x")
    with pytest.raises(tg.Error, match="if_else"):
        g.if_else(p, lambda: [x], lambda: [g.reduce_sum(x)])  # branch types differ
    with pytest.raises(tg.Error, match="non-tensor"):
        g.if_else(p, lambda: [1.0], lambda: [x])
    with pytest.raises(ZeroDivisionError):
        g.for_loop(3, [x], lambda i, v: [v * (1 / 0)])
    # the graph is still usable after the failed builds
    np.testing.assert_allclose(g.run({x: np.ones(2, np.float32)}, x * 2), [2, 2])


def test_endless_loop_stops_on_timeout():
    # A while_loop whose condition never turns false (issue 25): run(timeout=...) stops it
    # between iterations with a clear error, and the run's assignment is not applied.
    g = tg.Graph()
    v = g.variable(np.array([5.0], np.float32), "v")
    x = g.placeholder([], tg.f32, "x")
    out, = g.while_loop([x], lambda a: (a >= 0.0, [a]), lambda a: [a + 1.0])
    exe = g.compile([x], [out], [g.assign(v, v + 1.0)], device="cpu")
    with pytest.raises(tg.Error, match=r"timed out \(timeout 0.2 s\)"):
        exe.run([np.float32(1.0)], timeout=0.2)
    np.testing.assert_array_equal(exe.variable("v"), [5.0])
    with pytest.raises(tg.Error, match="timeout must be >= 0"):
        exe.run([np.float32(1.0)], timeout=-1)
