"""Gradients from Python against finite differences, and a model that trains."""
import numpy as np
import pytest

import tgraph as tg


def finite_difference(f, x, eps=1e-3):
    g = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        xp, xm = x.astype(np.float64), x.astype(np.float64)
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def test_gradients_of_a_small_network_match_finite_differences(rng):
    xv = rng.standard_normal((4, 3))
    w1v = rng.standard_normal((3, 5)) * 0.5
    w2v = rng.standard_normal((5, 2)) * 0.5
    g = tg.Graph()
    x = g.placeholder([4, 3], tg.f64, "x")
    w1 = g.placeholder([3, 5], tg.f64, "w1")
    w2 = g.placeholder([5, 2], tg.f64, "w2")
    h = g.tanh(x @ w1)
    loss = g.reduce_mean(g.square(g.softplus(h @ w2) - 0.3))
    dx, dw1, dw2 = g.gradients(loss, [x, w1, w2])
    exe = g.compile([x, w1, w2], [loss, dx, dw1, dw2], device="cpu")

    def f(*vals):
        return exe.run(list(vals))[0]

    _, gx, gw1, gw2 = exe.run([xv, w1v, w2v])
    np.testing.assert_allclose(gx, finite_difference(lambda v: f(v, w1v, w2v), xv), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(gw1, finite_difference(lambda v: f(xv, v, w2v), w1v), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(gw2, finite_difference(lambda v: f(xv, w1v, v), w2v), rtol=1e-5, atol=1e-8)


def test_gradient_is_zero_where_there_is_no_path():
    g = tg.Graph()
    a, b = g.placeholder([2], tg.f32, "a"), g.placeholder([2], tg.f32, "b")
    ga, gb = g.gradients(g.reduce_sum(a * a), [a, b])
    feeds = {a: np.array([1, -2], np.float32), b: np.array([3, 4], np.float32)}
    np.testing.assert_allclose(g.run(feeds, ga), [2, -4])
    np.testing.assert_array_equal(g.run(feeds, gb), [0, 0])


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_logistic_regression_trains(rng, optimizer):
    n, d = 256, 8
    true_w = rng.standard_normal(d).astype(np.float32)
    xs = rng.standard_normal((n, d)).astype(np.float32)
    labels = (xs @ true_w > 0).astype(np.float32)
    g = tg.Graph()
    x = g.placeholder([-1, d], tg.f32, "x")
    y = g.placeholder([-1], tg.f32, "y")
    w = g.variable(np.zeros(d, np.float32), "w")
    b = g.variable(np.zeros((), np.float32), "b")
    logits = g.reduce_sum(x * w, [1]) + b
    p = g.sigmoid(logits)
    loss = g.reduce_mean(g.softplus(logits) - y * logits)  # binary cross entropy
    grads = g.gradients(loss, [w, b])
    kw = {"momentum": 0.9} if optimizer == "sgd" else {}
    step = getattr(tg.optim, optimizer)(g, [w, b], grads, 0.1 if optimizer == "sgd" else 0.05, **kw)
    train = g.compile([x, y], [loss], [step], device="cpu")
    first = train.run([xs, labels])[0]
    for _ in range(100):
        last = train.run([xs, labels])[0]
    assert last < 0.3 * first, (first, last)
    infer = g.compile([x], [p], device="cpu")
    infer.set_variable("w", train.variable("w"))
    infer.set_variable("b", train.variable("b"))
    acc = ((infer.run([xs])[0] > 0.5) == (labels > 0.5)).mean()
    assert acc > 0.95


def test_batch_norm_training_switch_through_if_else(rng):
    """The running mean moves in training and not in inference (control_dependency + if_else)."""
    g = tg.Graph()
    x = g.placeholder([8, 4], tg.f32, "x")
    training = g.placeholder([], tg.bool_, "training")
    running = g.variable(np.zeros(4, np.float32), "running_mean")
    gamma, beta = g.constant(np.ones(4, np.float32)), g.constant(np.zeros(4, np.float32))

    def train_branch():
        y, mean, _ = g.batch_norm_training(x, gamma, beta, axis=-1)
        upd = g.assign(running, running * 0.9 + mean * 0.1)
        return g.control_dependency([upd], lambda: [y])

    def infer_branch():
        return [g.batch_norm(x, running, g.constant(np.ones(4, np.float32)), gamma, beta, axis=-1)]

    (y,) = g.if_else(training, train_branch, infer_branch)
    exe = g.compile([x, training], [y], device="cpu")
    a = rng.standard_normal((8, 4)).astype(np.float32) + 3
    (yt,) = exe.run([a, np.array(True)])
    np.testing.assert_allclose(yt.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(exe.variable("running_mean"), 0.1 * a.mean(0), rtol=1e-5)
    exe.run([a, np.array(False)])
    np.testing.assert_allclose(exe.variable("running_mean"), 0.1 * a.mean(0), rtol=1e-5)
