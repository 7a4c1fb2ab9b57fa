"""Converters for the fused attention kernels torch picks on CUDA.

F.scaled_dot_product_attention is one op on the CPU, but under AOTAutograd (torch.compile's
graphs, training and inference alike) torch lowers it to the kernel its dispatcher picks for
the device: on CUDA the memory-efficient kernel for f32, flash or cuDNN attention for f16 /
bf16, each with a backward of its own. They convert here to tgraph's one attention op (its
fused cuDNN kernel on CUDA) and their backwards to the standard attention gradient written in
tgraph ops. Their extra outputs (the log-sum-exp, random-number state, sequence offsets) are
computed or given torch's shapes only where the graph reads them (AOTAutograd saves them for
the backward, which converts here too and recomputes what it needs).
"""
from __future__ import annotations

import numpy as np
import torch

import tgraph as tg

from . import _aten as A


def _scale(q: tg.Tensor, scale) -> float:
    if scale is None and q.shape[-1] < 0:  # (1 / sqrt(-1) would be NaN scores)
        raise tg.Error(f"[torch] attention over queries {list(q.shape)} whose head size varies: give the "
                       "scale, or a fixed head size")
    return float(scale) if scale is not None else 1.0 / float(np.sqrt(q.shape[-1]))


def _scores(c, q, k, bias, is_causal: bool, scale: float) -> tg.Tensor:
    """q kᵀ · scale, plus the additive (or boolean: True keeps) bias, with the positions above
    the diagonal at -inf when causal (top-left aligned, as torch's is_causal)."""
    g = c.g
    s = g.mul(g.matmul(q, g.transpose(k, list(range(k.rank - 2)) + [k.rank - 1, k.rank - 2])), c.scalar(scale, q))
    if bias is not None:
        if bias.dtype == tg.bool_:
            s = g.select(bias, s, c.scalar(float("-inf"), s))
        else:
            s = g.add(s, c.cast(bias, s.dtype))
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        if lq < 0 or lk < 0:
            raise A.UnsupportedOp(f"[torch] {c.node.target}: causal attention over dynamic lengths")
        keep = np.tril(np.ones((lq, lk), dtype=bool))
        s = g.select(g.constant(keep), s, c.scalar(float("-inf"), s))
    return s


def _meta(c, i: int):
    v = c.node.meta.get("val")
    return v[i] if isinstance(v, (tuple, list)) and i < len(v) else None


def _filler(c, i: int):
    """Output i where the graph reads it but tgraph has no value for it (random-number state,
    the flash kernel's sequence offsets): zeros of torch's shape and type, or the SymInt."""
    v = _meta(c, i)
    if not isinstance(v, torch.Tensor):
        if v is not None and A._is_dynamic(A._sym_expr(v)):  # a size that varies (the longest sequence)
            return A.Sym(A._sym_expr(v))
        return int(v) if v is not None else 0
    if any(A._is_dynamic(A._sym_expr(d)) for d in v.shape):
        raise tg.Error(f"[torch] {c.node.target}: an auxiliary output of shape {list(v.shape)} whose sizes vary")
    # the random-number state is uint64, which tgraph lacks: i64 of the same size stands in
    dt = tg.i64 if v.dtype in (torch.uint64, torch.uint32) else A.tg_dtype(v.dtype)
    return c.g.constant(np.zeros(tuple(int(d) for d in v.shape), dtype=tg.numpy_dtype(dt)))


def _lse(c, q, k, bias, is_causal, scale, i: int) -> tg.Tensor:
    """The log-sum-exp of each query's scores (f32), in the shape torch gives output i (the
    memory-efficient kernel pads the query dim to a multiple of 32; cuDNN's keeps a trailing 1)."""
    g = c.g
    f = lambda t: c.cast(t, tg.f32) if t is not None and t.dtype != tg.bool_ else t  # noqa: E731
    lse = g.reduce_logsumexp(_scores(c, f(q), f(k), f(bias), is_causal, scale), [q.rank - 1], False)
    want = _meta(c, i)
    if not isinstance(want, torch.Tensor):
        return lse
    dims = [A._sym_expr(d) for d in want.shape]
    if any(A._is_dynamic(d) for d in dims):  # sizes that vary: torch's shape must be the queries' own
        qv = c.node.args[0].meta.get("val") if isinstance(c.node.args[0], torch.fx.Node) else None
        qdims = [A._sym_expr(d) for d in qv.shape[:-1]] if isinstance(qv, torch.Tensor) else None
        if qdims is not None and len(dims) == lse.rank == len(qdims) and all(a == b for a, b in zip(dims, qdims)):
            return lse
        raise tg.Error(f"[torch] {c.node.target}: log-sum-exp of shape {dims} for queries {list(q.shape)} whose "
                       "sizes vary")
    shape = [int(d) for d in dims]
    if shape == list(lse.shape):
        return lse
    if int(np.prod(shape)) == int(np.prod(lse.shape)):
        return g.reshape(lse, shape)
    if len(shape) == lse.rank and shape[:-1] == list(lse.shape[:-1]) and shape[-1] >= lse.shape[-1]:
        return g.pad(lse, [0] * lse.rank, [0] * (lse.rank - 1) + [shape[-1] - lse.shape[-1]],
                     mode="constant", constant=0.0)
    raise tg.Error(f"[torch] {c.node.target}: log-sum-exp of shape {shape} for queries {list(q.shape)}")


def _forward(c, q, k, v, bias, dropout_p, is_causal, scale, n_outputs: int):
    if dropout_p:
        raise A.UnsupportedOp(f"[torch] {c.node.target} with dropout_p={dropout_p}: torch keeps it")
    out = A._sdpa(c, q, k, v, bias, 0.0, is_causal, scale)
    used = A._used_outputs(c)
    res = [out] + [None] * (n_outputs - 1)
    if 1 in used:
        res[1] = _lse(c, q, k, bias, is_causal, _scale(q, scale), 1)
    for i in sorted(used - {0, 1}):
        res[i] = _filler(c, i)
    return tuple(res)


def _efficient(c, q, k, v, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0, is_causal=False, scale=None):
    return _forward(c, q, k, v, attn_bias, dropout_p, is_causal, scale, 4)


def _flash(c, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, scale=None):
    return _forward(c, q, k, v, None, dropout_p, is_causal, scale, 9)


def _cudnn(c, q, k, v, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0, is_causal=False,
           return_debug_mask=False, scale=None):
    return _forward(c, q, k, v, attn_bias, dropout_p, is_causal, scale, 9)


def _backward(c, dout, q, k, v, bias, out, is_causal, scale, dropout_p, want_bias: bool):
    """(dq, dk, dv, dbias) of softmax(q kᵀ·scale + bias) v, from the probabilities recomputed
    in f32: dv = Pᵀ dO, dS = P ∘ (dO vᵀ − rowsum(dO ∘ O)), dq = dS k·scale, dk = dSᵀ q·scale;
    dbias = dS summed to the bias's shape."""
    if dropout_p:
        raise A.UnsupportedOp(f"[torch] {c.node.target} with dropout_p={dropout_p}: torch keeps it")
    g = c.g
    dt = q.dtype
    if bias is not None and 0 in list(bias.shape):  # "no bias", as cuDNN's backward is given it
        bias = None
    f = lambda t: c.cast(t, tg.f32) if t is not None and t.dtype != tg.bool_ else t  # noqa: E731
    q32, k32, v32, do32, o32 = f(q), f(k), f(v), f(dout), f(out)
    s = _scale(q, scale)
    p = g.softmax(_scores(c, q32, k32, f(bias), is_causal, s), q.rank - 1)
    tr = lambda t: g.transpose(t, list(range(t.rank - 2)) + [t.rank - 1, t.rank - 2])  # noqa: E731
    dv = g.matmul(tr(p), do32)
    dp = g.matmul(do32, tr(v32))
    rows = g.reduce_sum(g.mul(do32, o32), [q.rank - 1], True)
    ds = g.mul(p, g.sub(dp, rows))
    dq = g.mul(g.matmul(ds, k32), c.scalar(s, ds))
    dk = g.mul(g.matmul(tr(ds), q32), c.scalar(s, ds))
    dbias = None
    if want_bias and bias is not None and bias.dtype != tg.bool_:
        lead = ds.rank - bias.rank
        axes = list(range(lead)) + [lead + i for i, d in enumerate(bias.shape) if d == 1 and ds.shape[lead + i] != 1]
        dbias = g.reduce_sum(ds, axes, True) if axes else ds
        dbias = g.reshape(dbias, list(bias.shape)) if lead or axes else dbias
        dbias = c.cast(dbias, bias.dtype)
    return c.cast(dq, dt), c.cast(dk, k.dtype), c.cast(dv, v.dtype), dbias


def _efficient_backward(c, dout, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
                        grad_input_mask, is_causal=False, scale=None):
    mask = list(grad_input_mask)
    dq, dk, dv, db = _backward(c, dout, q, k, v, attn_bias, out, is_causal, scale, dropout_p, bool(mask[3]))
    return tuple(t if m else None for t, m in zip((dq, dk, dv, db), mask))


def _flash_backward(c, dout, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                    philox_seed, philox_offset, scale=None):
    return _backward(c, dout, q, k, v, None, out, is_causal, scale, dropout_p, False)[:3]


def _cudnn_backward(c, dout, q, k, v, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k,
                    max_q, max_k, dropout_p, is_causal, scale=None):
    return _backward(c, dout, q, k, v, attn_bias, out, is_causal, scale, dropout_p, False)[:3]


CONVERTERS = {
    "_scaled_dot_product_efficient_attention": _efficient,
    "_scaled_dot_product_flash_attention": _flash,
    "_scaled_dot_product_cudnn_attention": _cudnn,
    "_scaled_dot_product_efficient_attention_backward": _efficient_backward,
    "_scaled_dot_product_flash_attention_backward": _flash_backward,
    "_scaled_dot_product_cudnn_attention_backward": _cudnn_backward,
}
