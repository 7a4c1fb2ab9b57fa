"""Ops through the Python API against numpy on random inputs (the C++ suites test every op in
depth; these check that each family's arguments reach the op as Python spells them)."""
import math

import numpy as np
import pytest

import tgraph as tg

UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda a: 1 / np.sqrt(a), "square": np.square, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "relu": lambda a: np.maximum(a, 0),
    "erf": np.vectorize(math.erf), "floor": np.floor, "ceil": np.ceil, "log1p": np.log1p,
    "silu": lambda a: a / (1 + np.exp(-a)), "softplus": lambda a: np.log1p(np.exp(a)),
    "gelu": lambda a: 0.5 * a * (1 + np.vectorize(math.erf)(a / math.sqrt(2))),
    "gelu_tanh": lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(rng, name):
    a = rng.uniform(0.1, 3.0, (5, 7)).astype(np.float32)
    if name not in ("log", "sqrt", "rsqrt", "log1p"):
        a -= 1.5
    g = tg.Graph()
    x = g.placeholder(a.shape, tg.f32, "x")
    np.testing.assert_allclose(g.run({x: a}, getattr(g, name)(x)), UNARY[name](a).astype(np.float32),
                               rtol=2e-5, atol=2e-6)


def test_parameterised_unary(rng):
    a = rng.standard_normal(50).astype(np.float32)
    g = tg.Graph()
    x = g.placeholder(a.shape, tg.f32, "x")
    lr, elu, hs = g.run({x: a}, [g.leaky_relu(x, alpha=0.2), g.elu(x, 0.5), g.hard_sigmoid(x)])
    np.testing.assert_allclose(lr, np.where(a > 0, a, 0.2 * a), rtol=1e-6)
    np.testing.assert_allclose(elu, np.where(a > 0, a, 0.5 * np.expm1(a)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(hs, np.clip(a / 6 + 0.5, 0, 1), rtol=1e-6)


@pytest.mark.parametrize("name,fn", [
    ("reduce_sum", np.sum), ("reduce_mean", np.mean), ("reduce_max", np.max), ("reduce_min", np.min),
    ("reduce_prod", np.prod), ("reduce_variance", np.var),
])
@pytest.mark.parametrize("axes,keep", [([], False), ([1], False), ([0, 2], True), ([-1], True)])
def test_reductions(rng, name, fn, axes, keep):
    a = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    g = tg.Graph()
    x = g.placeholder(a.shape, tg.f32, "x")
    got = g.run({x: a}, getattr(g, name)(x, axes, keep))
    want = fn(a, axis=tuple(axes) if axes else None, keepdims=keep)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_scans_sort_topk_argmax(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    g = tg.Graph()
    x = g.placeholder(a.shape, tg.f32, "x")
    v, i = g.top_k(x, 3)
    cs, srt, am, amin = g.run({x: a}, [g.cumsum(x, 1), g.sort(x, -1, descending=True), g.argmax(x, 1),
                                       g.argmin(x, 0)])
    np.testing.assert_allclose(cs, np.cumsum(a, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(srt, -np.sort(-a, -1))
    np.testing.assert_array_equal(am, a.argmax(1))
    np.testing.assert_array_equal(amin, a.argmin(0))
    vv, ii = g.run({x: a}, [v, i])
    np.testing.assert_array_equal(vv, -np.sort(-a, -1)[:, :3])
    np.testing.assert_array_equal(np.take_along_axis(a, ii.astype(np.int64), 1), vv)


def test_shape_ops(rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    g = tg.Graph()
    x = g.placeholder(a.shape, tg.f32, "x")
    outs = g.run({x: a}, [
        g.reshape(x, [6, -1]), g.transpose(x, [2, 0, 1]), g.concat([x, x], 1), g.stack([x, x], 0),
        g.pad(x, [0, 1, 2], [1, 0, 0], mode="reflect"), g.tile(x, [1, 2, 1]), g.reverse(x, [2]),
        g.expand_dims(x, [0]), g.flatten(x, 1), x.T, g.broadcast_to(g.slice(x, [0, 0, 0], [1, 3, 4]), [2, 3, 4]),
    ])
    want = [a.reshape(6, -1), a.transpose(2, 0, 1), np.concatenate([a, a], 1), np.stack([a, a]),
            np.pad(a, [(0, 1), (1, 0), (2, 0)], mode="reflect"), np.tile(a, (1, 2, 1)), a[:, :, ::-1],
            a[None], a.reshape(2, 12), a.T, np.broadcast_to(a[:1], (2, 3, 4))]
    for got, w in zip(outs, want):
        np.testing.assert_array_equal(got, w)
    parts = g.run({x: a}, g.split(x, [1, 3], 2))
    np.testing.assert_array_equal(parts[0], a[:, :, :1])
    np.testing.assert_array_equal(parts[1], a[:, :, 1:])


def test_matmul_batched_and_transposed(rng):
    a = rng.standard_normal((2, 5, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    c = rng.standard_normal((2, 3, 6)).astype(np.float32)
    g = tg.Graph()
    x, y, z = (g.placeholder(t.shape, tg.f32, n) for t, n in ((a, "a"), (b, "b"), (c, "c")))
    bt, batched = g.run({x: a, y: b, z: c}, [g.matmul(x, y, transpose_b=True), x @ z])
    np.testing.assert_allclose(bt, a @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batched, a @ c, rtol=1e-5, atol=1e-5)


def conv2d_nhwc(x, w, stride, pad):
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    xp = np.pad(x, [(0, 0), (pad, pad), (pad, pad), (0, 0)])
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, oh, ow, o), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            y[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [0, 1, 2]))
    return y


def test_conv2d_and_pooling(rng):
    a = rng.standard_normal((2, 7, 7, 3)).astype(np.float32)
    k = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    g = tg.Graph()
    x, w = g.placeholder(a.shape, tg.f32, "x"), g.placeholder(k.shape, tg.f32, "w")
    y = g.conv2d(x, w, tg.ConvDesc(stride=[2, 2], explicit_padding=[1, 1, 1, 1]))
    p = g.max_pool2d(x, tg.PoolDesc(kernel=[2, 2], stride=[2, 2]))
    gy, gp = g.run({x: a, w: k}, [y, p])
    np.testing.assert_allclose(gy, conv2d_nhwc(a, k, 2, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(gp, a[:, :6, :6, :].reshape(2, 3, 2, 3, 2, 3).max((2, 4)))


def test_softmax_layer_norm_cross_entropy(rng):
    a = rng.standard_normal((4, 10)).astype(np.float32)
    lab = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 4)]
    g = tg.Graph()
    x, l = g.placeholder(a.shape, tg.f32, "x"), g.placeholder(lab.shape, tg.f32, "l")
    gamma, beta = g.constant(np.full(10, 2, np.float32)), g.constant(np.full(10, 0.5, np.float32))
    sm, ln, ce = g.run({x: a, l: lab}, [g.softmax(x), g.layer_norm(x, gamma, beta),
                                         g.softmax_cross_entropy(x, l, reduction="mean")])
    e = np.exp(a - a.max(1, keepdims=True))
    ref_sm = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(sm, ref_sm, rtol=1e-5, atol=1e-7)
    mu, var = a.mean(1, keepdims=True), a.var(1, keepdims=True)
    np.testing.assert_allclose(ln, (a - mu) / np.sqrt(var + 1e-5) * 2 + 0.5, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ce, -(lab * np.log(ref_sm)).sum(1).mean(), rtol=1e-5)


def test_gather_nd_with_batch_dims(rng):
    a = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)
    idx = np.stack([rng.integers(0, 5, (2, 6)), rng.integers(0, 4, (2, 6))], -1).astype(np.int32)
    g = tg.Graph()
    x, i = g.placeholder(a.shape, tg.f32, "x"), g.placeholder(idx.shape, tg.i32, "i")
    got = g.run({x: a, i: idx}, g.gather_nd(x, i, batch_dims=1))
    want = np.stack([a[b][idx[b, :, 0], idx[b, :, 1]] for b in range(2)])
    np.testing.assert_array_equal(got, want)


def test_scatter_add_with_duplicates(rng):
    base = rng.standard_normal((5, 3)).astype(np.float32)
    idx = np.array([[1], [3], [1]], np.int32)
    upd = rng.standard_normal((3, 3)).astype(np.float32)
    g = tg.Graph()
    x = g.constant(base)
    y = g.scatter_nd(x, g.constant(idx), g.constant(upd), mode="add")
    want = base.copy()
    np.add.at(want, idx[:, 0], upd)
    np.testing.assert_allclose(g.run({}, y), want, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["sum", "max", "min", "argmax"])
def test_stencil_2d(rng, reduction):
    a = rng.standard_normal((1, 1, 6, 7)).astype(np.float32)
    wts = rng.uniform(0.5, 1.5, (3, 3)).astype(np.float32)
    g = tg.Graph()
    x = g.placeholder(a.shape, tg.f32, "x")
    y = g.stencil_2d(x, g.constant(wts), tg.StencilDesc(reduction=reduction, padding_style="valid"))
    got = g.run({x: a}, y)
    win = np.lib.stride_tricks.sliding_window_view(a[0, 0], (3, 3))  # [4,5,3,3]
    prod = win * wts
    ref = {"sum": prod.sum((2, 3)), "max": prod.max((2, 3)), "min": prod.min((2, 3)),
           "argmax": prod.reshape(4, 5, 9).argmax(-1)}[reduction]
    np.testing.assert_allclose(np.squeeze(got), ref, rtol=1e-5, atol=1e-6)


def test_random_is_reproducible_and_well_distributed():
    g = tg.Graph()
    s = g.random_state(7)
    v, s2 = g.random(s, tg.RandomDesc(shape=[20000], distribution="normal", a=1.0, b=2.0))
    w, _ = g.random(s2, tg.RandomDesc(shape=[20000]))
    a1, b1 = g.run({}, [v, w])
    a2, _ = g.run({}, [v, w])
    np.testing.assert_array_equal(a1, a2)
    assert abs(a1.mean() - 1.0) < 0.05 and abs(a1.std() - 2.0) < 0.05
    assert 0 <= b1.min() and b1.max() < 1 and abs(b1.mean() - 0.5) < 0.02


def test_attention(rng):
    q, k, v = (rng.standard_normal((2, 4, 8)).astype(np.float32) for _ in range(3))
    g = tg.Graph()
    tq, tk, tv = (g.constant(t) for t in (q, k, v))
    got = g.run({}, g.scaled_dot_product_attention(tq, tk, tv, desc=tg.AttentionDesc(causal=True)))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(8)
    s = np.where(np.tril(np.ones((4, 4), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)
