"""Converters of the ATen kernels torch picks only on CUDA (fused attention and its backward, the
cuDNN grid sampler) and of ops its CUDA graphs keep whole (linalg_vector_norm), checked on the
CPU: each graph is traced with fake tensors (the kernels have no CPU implementation), converted
strictly (nothing left to torch) and run by tgraph against the math torch computes."""
import math

import pytest
import torch
import torch.nn.functional as F

tgt = pytest.importorskip("tgraph.torch")
aten = torch.ops.aten


def _run(f, *args):
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(f, tracing_mode="fake")(*args)
    out = tgt._compile_aten(gm, list(args))(list(args))
    return out if isinstance(out, (list, tuple)) else [out]


def _reference(q, k, v, bias, causal, scale):
    """Attention and its log-sum-exp in f64, with autograd's gradients for a given dout."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.double()
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v.double(), torch.logsumexp(s, -1)


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TGRAPH_TORCH_STRICT", "1")


@pytest.mark.parametrize("causal,with_bias,scale", [(False, True, None), (True, False, 0.3), (False, False, None)])
def test_efficient_attention_and_its_backward(causal, with_bias, scale):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    bias = torch.randn(2, 3, 5, 5) if with_bias else None
    dout = torch.randn(2, 3, 5, 8)
    sc = scale if scale is not None else 1 / math.sqrt(8)
    want, want_lse = _reference(q, k, v, bias, causal, sc)

    def fwd(q, k, v, *b):
        o, lse, _, _ = aten._scaled_dot_product_efficient_attention.default(
            q, k, v, b[0] if b else None, True, 0.0, causal, scale=scale)
        return o, lse
    args = (q, k, v) + ((bias,) if bias is not None else ())
    o, lse = _run(fwd, *args)
    torch.testing.assert_close(o.double(), want, rtol=1e-5, atol=1e-5)
    assert lse.shape == (2, 3, 32)  # the kernel pads the query dim to a multiple of 32
    torch.testing.assert_close(lse[..., :5].double(), want_lse, rtol=1e-5, atol=1e-5)

    leaves = [t.double().requires_grad_() for t in args]
    w, _ = _reference(*leaves[:3], leaves[3] if bias is not None else None, causal, sc)
    grads = torch.autograd.grad(w, leaves, dout.double())

    def bwd(dout, q, k, v, o, lse, *b):
        seed, off = torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64)
        return aten._scaled_dot_product_efficient_attention_backward.default(
            dout, q, k, v, b[0] if b else None, o, lse, seed, off, 0.0, [True, True, True, bool(b)], causal,
            scale=scale)
    got = _run(bwd, dout, q, k, v, o, lse, *args[3:])
    for g, r in zip(got, grads):
        torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["flash", "cudnn"])
def test_flash_and_cudnn_attention_and_backward(kind):
    torch.manual_seed(1)
    q, k, v, dout = (torch.randn(1, 2, 6, 4) for _ in range(4))
    want, want_lse = _reference(q, k, v, None, True, 0.5)
    if kind == "flash":
        def fwd(q, k, v):
            r = aten._scaled_dot_product_flash_attention.default(q, k, v, 0.0, True, False, scale=0.5)
            return r[0], r[1]
    else:
        def fwd(q, k, v):
            r = aten._scaled_dot_product_cudnn_attention.default(q, k, v, None, True, 0.0, True, False, scale=0.5)
            return r[0], r[1]
    o, lse = _run(fwd, q, k, v)
    torch.testing.assert_close(o.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.reshape(1, 2, 6).double(), want_lse, rtol=1e-5, atol=1e-5)

    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    grads = torch.autograd.grad(_reference(*leaves, None, True, 0.5)[0], leaves, dout.double())
    z, e = torch.zeros((), dtype=torch.int64), torch.zeros(0)  # random state, sequence offsets: unread
    if kind == "flash":
        def bwd(dout, q, k, v, o, lse, z, e):
            return aten._scaled_dot_product_flash_attention_backward.default(
                dout, q, k, v, o, lse, e, e, 6, 6, 0.0, True, z, z, scale=0.5)
    else:
        def bwd(dout, q, k, v, o, lse, z, e):
            return aten._scaled_dot_product_cudnn_attention_backward.default(
                dout, q, k, v, o, lse, z, z, e, e, e, 6, 6, 0.0, True, scale=0.5)
    got = _run(bwd, dout, q, k, v, o, lse, z, e)
    for g, r in zip(got, grads):
        torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-5)


def test_cudnn_grid_sampler_is_bilinear_zeros_align_corners():
    torch.manual_seed(2)
    x, grid = torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 2.4 - 1.2  # some taps outside
    want = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    # built by hand: the op has no fake implementation to trace it with off CUDA
    g = torch.fx.Graph()
    ins = [g.placeholder(n) for n in ("x", "grid")]
    for node, t in zip(ins, (x, grid)):
        node.meta["val"] = t
    node = g.call_function(aten.cudnn_grid_sampler.default, tuple(ins))
    node.meta["val"] = want
    g.output(node)
    got = tgt._compile_aten(torch.fx.GraphModule(torch.nn.Module(), g), [x, grid])([x, grid])
    got = got[0] if isinstance(got, (list, tuple)) else got
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ord,dim,keepdim", [(2, None, False), (2, [1], True), (1, [0, 2], False),
                                              (math.inf, [2], False), (-math.inf, None, False), (0, [1], False),
                                              (3.5, [-1], True)])
def test_linalg_vector_norm(ord, dim, keepdim):
    torch.manual_seed(3)
    x = torch.randn(3, 4, 5)
    x[0, 1, 2] = 0.0
    f = lambda x: aten.linalg_vector_norm.default(x, ord, dim, keepdim)  # noqa: E731
    torch.testing.assert_close(_run(f, x)[0], f(x), rtol=1e-5, atol=1e-6)
