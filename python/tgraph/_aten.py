"""ATen -> tgraph: one converter per ATen op (the table _CONVERTERS) and convert(), which builds
a tgraph graph from an FX graph of ATen ops (torch.export's core ATen, AOTAutograd's forward
and backward graphs, make_fx's). tgraph.torch compiles and runs what this builds."""
from __future__ import annotations

import functools
import math
import operator
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

import tgraph as tg

class UnsupportedOp(tg.Error):
    """An ATen op the frontend has no converter for (named in the message)."""


_DTYPES = {torch.float32: tg.f32, torch.float16: tg.f16, torch.bfloat16: tg.bf16, torch.float64: tg.f64,
           torch.int8: tg.i8, torch.int16: tg.i16, torch.int32: tg.i32, torch.int64: tg.i64,
           torch.uint8: tg.u8, torch.bool: tg.bool_,
           torch.float8_e4m3fn: tg.f8e4m3, torch.float8_e5m2: tg.f8e5m2}


def tg_dtype(t: torch.dtype) -> tg.DType:
    if t not in _DTYPES:
        raise tg.Error(f"[torch] element type {t} has no tgraph type")
    return _DTYPES[t]


def _numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    # numpy has no bfloat16 or 8-bit floats: widened (exactly) to float32
    narrow = t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
    return (t.float() if narrow else t).numpy()


# ---- the converters: one function per ATen op (overloads share it) ----------------------------

class Sym:
    """A size torch keeps symbolic (dynamic shapes): its sympy expression over the input sizes.
    Converters pass it to _Ctx.dims, which names it by the fed tensor dim it equals; used where
    tgraph needs a number, it refuses (the graph then compiles per size: torch.py)."""

    def __init__(self, expr):
        self.expr = expr

    def __int__(self):
        raise tg.Error(f"[torch] the dynamic size {self.expr} is used where tgraph needs a fixed number")

    __index__ = __int__

    def __repr__(self):
        return f"Sym({self.expr})"


class SizeOut(NamedTuple):
    """A size among a graph's outputs (a training forward saves sizes for its backward): torch's
    expression, evaluated at each run from the fed tensors' dims (symbol -> (feed, dim))."""
    expr: Any
    dims: dict

    def value(self, inputs: list) -> int:
        return int(self.expr.subs({s: int(inputs[i].shape[d]) for s, (i, d) in self.dims.items()}))


class InputOut(NamedTuple):
    """An output that is one of the graph's fed tensors as it came in (a training forward saves
    parameters for its backward this way): the caller's tensor itself, not a copy the run makes
    (ResNet-50: 0.1 GiB of f32 weights copied each step)."""
    index: int  # among the fed tensors

    def value(self, inputs: list):
        return inputs[self.index]


def _sym_expr(v):
    """The sympy expression of a SymInt / SymFloat / Sym, a number for a concrete one."""
    if isinstance(v, Sym):
        return v.expr
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        return v.node.expr
    return v


def _is_dynamic(v) -> bool:
    e = _sym_expr(v)
    return not isinstance(e, (int, float)) and not getattr(e, "is_number", False)


class _Ctx:
    """What a converter sees: the graph, the node being converted, and helpers."""

    def __init__(self, g: tg.Graph):
        self.g = g
        self.node = None
        self.rng_feed = None  # a Philox state fed per run, made when a random op needs it
        self.rng = None       # the state threaded from one random op to the next
        self.sym_sources = {}  # sympy symbol -> (fed tensor, dim) whose size it is (dynamic shapes)
        # a derived symbolic size (an expression of the symbols: a strided convolution's
        # (h - 1) // 2 + 1) -> (tensor, dim) of the latest converted result that has it
        self.derived = {}

    def dims(self, shape, like: tg.Tensor | None = None, known: dict | None = None):
        """A size list as a reshape / broadcast_to target: (codes, sources). Fixed sizes stay
        numbers; a symbolic size that is a fed tensor's dim becomes tg.dim_from_source of that
        tensor (or of another tensor's, by `known`: expression -> (tensor, dim)); -1 (torch's
        "this dim of `like`", as expand has it) takes like's dim; any other symbolic size (a
        product) is None, for the caller to infer or refuse."""
        codes, sources, offset = [], [], {}

        def source(t, d):
            if id(t) not in offset:
                offset[id(t)] = sum(x.rank for x in sources)
                sources.append(t)
            return tg.dim_from_source(offset[id(t)] + d)

        lead = len(shape) - like.rank if like is not None else 0
        for i, s in enumerate(shape):
            e = _sym_expr(s)
            if isinstance(e, int) or getattr(e, "is_Integer", False):
                e = int(e)
                if e == -1 and like is not None and i >= lead:
                    d = like.shape[i - lead]
                    codes.append(d if d >= 0 else source(like, i - lead))
                else:
                    codes.append(e)
            elif e in self.sym_sources:
                codes.append(source(*self.sym_sources[e]))
            elif known and e in known:
                codes.append(source(*known[e]))
            elif e in self.derived:
                codes.append(source(*self.derived[e]))
            else:
                codes.append(None)
        return codes, sources

    def size_tensor(self, sizes) -> tg.Tensor:
        """Sizes (numbers, torch's expressions over the input sizes, or 0-D i64 tensors a converter
        computed) as a 1-D i64 tensor computed in the graph from the fed tensors' dims: what a
        sized op (Graph.*_sized) takes, known in each size's copy of the executable. Raises where
        an expression is beyond it."""
        return self.g.concat([self.g.reshape(self.size_scalar(v), [1]) for v in sizes], 0)

    def size_scalar(self, v) -> tg.Tensor:
        """One size as a 0-D tensor computed in the graph (size_tensor): i64, or f64 for a float
        computed from sizes (torch's decompositions divide sizes: `IntTrueDiv(h_out, h)`). An
        integer that sympy computes through a fraction (`s0 / 2` of an even s0) comes back i64. A
        0-D tensor (a size a converter computed, _Ctx.dim) is taken as it is."""
        if isinstance(v, tg.Tensor):
            return v
        t = self._size_scalar(v)
        e = _sym_expr(v)
        return self.cast(t, tg.i64) if t.dtype == tg.f64 and getattr(e, "is_integer", False) else t

    def _size_scalar(self, v) -> tg.Tensor:
        g, e = self.g, _sym_expr(v)
        if isinstance(e, int) or getattr(e, "is_Integer", False):
            return g.constant(np.array(int(e), np.int64))
        if isinstance(e, float) or getattr(e, "is_number", False):
            return g.constant(np.array(float(e), np.float64))
        for table in (self.sym_sources, self.derived):
            if e in table:
                return self.dim_scalar(*table[e])
        kind = type(e).__name__
        args = [self.size_scalar(a) for a in getattr(e, "args", ())]
        if any(a.dtype == tg.f64 for a in args):  # a float among them: all computed as floats
            args = [self.cast(a, tg.f64) for a in args]
        if getattr(e, "is_Add", False):
            return functools.reduce(g.add, args)
        if getattr(e, "is_Mul", False):
            return functools.reduce(g.mul, args)
        if kind in ("IntTrueDiv", "FloatTrueDiv") and len(args) == 2:
            return g.div(self.cast(args[0], tg.f64), self.cast(args[1], tg.f64))
        if kind == "ToFloat" and len(args) == 1:
            return self.cast(args[0], tg.f64)
        rounding = {"FloorToInt": g.floor, "CeilToInt": g.ceil, "TruncToInt": g.trunc}
        if kind in rounding and len(args) == 1:
            return self.cast(rounding[kind](self.cast(args[0], tg.f64)), tg.i64)
        if getattr(e, "is_Pow", False) and getattr(e.args[1], "is_Integer", False) and 0 < int(e.args[1]) <= 4:
            return functools.reduce(g.mul, [args[0]] * int(e.args[1]))
        if kind in ("Mod", "PythonMod") and len(args) == 2:
            return g.floor_mod(args[0], args[1])
        if kind == "FloorDiv" and len(args) == 2:  # exact: (a - a mod b) / b
            return g.div(g.sub(args[0], g.floor_mod(args[0], args[1])), args[1])
        if kind in ("FloatPow", "PowByNatural") and len(args) == 2:  # (a head size's square root)
            return g.pow(self.cast(args[0], tg.f64), self.cast(args[1], tg.f64))
        if kind in ("Max", "Min") and args:
            return functools.reduce(g.maximum if kind == "Max" else g.minimum, args)
        raise tg.Error(f"[torch] the size {e} ({kind}) is not one tgraph computes in the graph")

    def dim_scalar(self, t: tg.Tensor, d: int) -> tg.Tensor:
        """Dim d of t as a 0-D i64 tensor (its size at run time)."""
        return self.g.reshape(self.g.slice(self.g.shape_of(t), [d], [d + 1]), [])

    # Sizes a converter computes from its operands' dims, where some may vary (-1): a number where
    # the dim is fixed, else a 0-D i64 tensor. Arithmetic on the -1 itself would make a negative
    # number, which a reshape reads as a size taken from a shape source (or refuses).
    def dim(self, t: tg.Tensor, d: int):
        """Dim d of t: its number where fixed, else its size at run time (dim_scalar)."""
        return t.shape[d] if t.shape[d] >= 0 else self.dim_scalar(t, d)

    def size_product(self, *sizes):
        """The product of sizes (numbers or 0-D i64 tensors, as dim gives them)."""
        number = math.prod(int(v) for v in sizes if not isinstance(v, tg.Tensor))
        tensors = [v for v in sizes if isinstance(v, tg.Tensor)]
        if not tensors:
            return number
        product = functools.reduce(self.g.mul, tensors)
        return product if number == 1 else self.g.mul(product, self.size_scalar(number))

    def broadcast_dims(self, x: tg.Tensor, sizes) -> tg.Tensor:
        """x broadcast to `sizes` (numbers or 0-D i64 tensors): broadcast_to when all are numbers,
        else one sized in the graph."""
        if not any(isinstance(v, tg.Tensor) for v in sizes):
            return self.g.broadcast_to(x, [int(v) for v in sizes])
        return self.g.broadcast_to_sized(x, self.size_tensor(sizes))

    def reshape_to(self, x: tg.Tensor, sizes) -> tg.Tensor:
        """x reshaped to `sizes` (numbers or 0-D i64 tensors): a reshape when all are numbers,
        else one sized in the graph (fixed in each size's copy of the executable)."""
        if not any(isinstance(v, tg.Tensor) for v in sizes):
            return self.g.reshape(x, [int(v) for v in sizes])
        return self.g.reshape_sized(x, self.size_tensor(sizes))

    def _random_state(self) -> tg.Tensor:
        """The state the next random op draws from (the run's fed Philox state, made at the first)."""
        if self.rng_feed is None:
            self.rng_feed = self.g.placeholder([2], tg.i64, "rng_state")
            self.rng = self.rng_feed
        return self.rng

    def keep_mask(self, like: tg.Tensor, rate: float) -> tg.Tensor:
        """A boolean tensor of like's shape, each element True with probability 1 - rate, from the
        run's random stream: where like's sizes vary (a training step over a varying sequence),
        through the dropout op, whose values take its input's run-time shape (random_uniform's
        shape is numbers)."""
        ones = self.g.broadcast_like(self.g.scalar(1.0, tg.f32), like)
        kept, self.rng = self.g.dropout(ones, self._random_state(), float(rate))
        return self.g.not_equal(kept, self.g.scalar(0.0, tg.f32))

    def random_uniform(self, shape) -> tg.Tensor:
        """Uniform [0, 1) values of `shape` from the run's random stream: the stream's state is a
        feed that every run gets fresh from torch's generator (so torch.manual_seed governs it)."""
        v, self.rng = self.g.random(self._random_state(), tg.RandomDesc(shape=[int(d) for d in shape]))
        return v

    @property
    def out_dtype(self) -> tg.DType | None:
        v = self.node.meta.get("val") if self.node is not None else None
        return tg_dtype(v.dtype) if isinstance(v, torch.Tensor) else None

    def scalar(self, v, like: tg.Tensor) -> tg.Tensor:
        return self.tensor(v, like)

    def tensor(self, v, like: tg.Tensor | None = None, dtype: tg.DType | None = None) -> tg.Tensor:
        """A Python number as a scalar tensor; integers exactly (not through a double)."""
        if isinstance(v, tg.Tensor):
            return v
        t = dtype or (like.dtype if like is not None else (tg.f32 if isinstance(v, float) else tg.i64))
        if isinstance(v, Sym):  # a size used as a number (x * n): computed in the graph per size
            return self.cast(self.size_scalar(v), t)
        if t in _FLOATS or t == tg.bool_ or not float(v).is_integer():
            return self.g.scalar(float(v), t)
        return self.g.constant(np.array(int(v), dtype=tg.numpy_dtype(t)))

    def result_type(self) -> tg.DType:
        """torch's promoted type of this node's first two operands (tensors or Python numbers)."""
        vals = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in self.node.args[:2]]
        return tg_dtype(torch.result_type(*vals))

    def cast(self, x: tg.Tensor, t: tg.DType | None) -> tg.Tensor:
        return x if t is None or x.dtype == t else self.g.cast(x, t)

    def operands(self, a, b, to: tg.DType | None):
        """Both operands as tensors of type `to` (torch's promoted type for this node)."""
        if not isinstance(a, tg.Tensor) and not isinstance(b, tg.Tensor):
            raise tg.Error("[torch] a binary op on two Python numbers")
        like = a if isinstance(a, tg.Tensor) else b
        t = to or like.dtype
        return self.cast(self.tensor(a, like, t), t), self.cast(self.tensor(b, like, t), t)


def _axes(dims, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return [d % rank if rank else 0 for d in dims]


_FLOATS = (tg.f32, tg.f64, tg.f16, tg.bf16)


def _binary(op: str, compare: bool = False):
    def conv(c: _Ctx, a, b, alpha=1, rounding_mode=None):
        # operands in torch's promoted type (a comparison's result is bool, so ask torch)
        x, y = c.operands(a, b, c.result_type() if compare else c.out_dtype)
        if alpha != 1:
            y = c.g.mul(y, c.scalar(alpha, y))
        if op == "div" and rounding_mode is not None:
            if x.dtype in _FLOATS:
                q = c.g.div(x, y)
                return c.g.floor(q) if rounding_mode == "floor" else c.g.trunc(q)
            if rounding_mode == "trunc":
                return c.g.div(x, y)  # integer division truncates
            return c.g.div(c.g.sub(x, c.g.floor_mod(x, y)), y)  # exact: a multiple of y
        return getattr(c.g, op)(x, y)
    return conv


def _unary(op: str):
    def conv(c: _Ctx, x, *args):
        return getattr(c.g, op)(c.cast(x, c.out_dtype) if op not in ("logical_not", "is_nan", "is_inf",
                                                                     "is_finite") else x)
    return conv


def _reduce(op: str):
    def conv(c: _Ctx, x, dims=None, keepdim=False, dtype=None):
        if isinstance(dims, (list, tuple)) and len(dims) == 0:
            dims = None
        y = getattr(c.g, op)(c.cast(x, c.out_dtype) if op in ("reduce_sum", "reduce_mean", "reduce_prod") else x,
                             _axes(dims, x.rank), keepdim)
        return c.cast(y, c.out_dtype)
    return conv


def _convolution(c: _Ctx, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    g = c.g
    nd = x.rank - 2
    if nd == 1:  # conv1d as conv2d over [N, C, 1, L]
        x, w = g.expand_dims(x, [2]), g.expand_dims(w, [2])
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
        output_padding = [0, *output_padding]
    pads = [p for p in padding for _ in (0, 1)]
    d = tg.ConvDesc(stride=list(stride), dilation=list(dilation), explicit_padding=pads, groups=groups,
                    data_layout="nchw" if nd <= 2 else "ncdhw", weights_layout="oihw" if nd <= 2 else "oidhw")
    if transposed:
        if nd == 3:
            raise UnsupportedOp("[torch] conv_transpose3d has no tgraph op")
        d.output_padding = list(output_padding)
        y = g.conv_transpose2d(x, w, d)
    elif nd == 3:
        y = _conv3d_as_2d(c, x, w, stride, padding, dilation, groups)
    else:
        y = g.conv2d(x, w, d)
    if bias is not None:
        y = g.add(y, g.reshape(bias, [1, -1] + [1] * (y.rank - 2)))
    return g.squeeze(y, [2]) if nd == 1 else y


def _conv3d_as_2d(c: _Ctx, x, w, stride, padding, dilation, groups):
    """conv3d as one conv2d (the CPU's conv3d is the reference loop; conv2d runs oneDNN): each
    output depth gathers its kd input depths into the channels ([N Do, G kd Cg, H, W]) and the
    weights [O, Cg, kd, kh, kw] become [O, kd Cg, kh, kw] in that order. Batch, depth and image
    sizes that vary (-1) are computed in the graph (sized slices and reshapes, fixed in each
    size's copy): one executable for a video model's every clip size."""
    g = c.g
    n, ch, depth, h, wd = x.shape
    o, cg, kd, kh, kw = w.shape
    sd, pd, dd = stride[0], padding[0], dilation[0]
    xt = g.transpose(x, [0, 2, 1, 3, 4])  # [N, D, C, H, W]
    if pd:
        xt = g.pad(xt, [0, pd, 0, 0, 0], [0, pd, 0, 0, 0])
    d = tg.ConvDesc(stride=list(stride[1:]), dilation=list(dilation[1:]),
                    explicit_padding=[p for p in padding[1:] for _ in (0, 1)], groups=groups,
                    data_layout="nchw", weights_layout="oihw")
    w2 = g.reshape(g.transpose(w, [0, 2, 1, 3, 4]), [o, kd * cg, kh, kw])
    if min(n, depth, h, wd) >= 0:
        do = (depth + 2 * pd - dd * (kd - 1) - 1) // sd + 1
        taps = [g.strided_slice(xt, tg.SliceDesc(begin=[0, t * dd, 0, 0, 0],
                                                 end=[0, t * dd + (do - 1) * sd + 1, 0, 0, 0],
                                                 strides=[1, sd, 1, 1, 1], begin_mask=0b11101, end_mask=0b11101))
                for t in range(kd)]
        cols = g.stack(taps, 2) if kd > 1 else g.expand_dims(taps[0], [2])  # [N, Do, kd, C, H, W]
        cols = g.reshape(cols, [n * do, kd, groups, cg, h, wd])
        cols = g.reshape(g.transpose(cols, [0, 2, 1, 3, 4, 5]), [n * do, groups * kd * cg, h, wd])
        y = g.conv2d(cols, w2, d)  # [N Do, O, Ho, Wo]
        y = g.reshape(y, [n, do, o, y.shape[2], y.shape[3]])
        return g.transpose(y, [0, 2, 1, 3, 4])

    num = c.size_scalar
    # Do = (D + 2 pd - dd (kd - 1) - 1) // sd + 1, the span never negative (the convolution
    # refuses a clip shorter than its kernel at its own run)
    span = g.maximum(g.add(num(c.dim(x, 2)), num(2 * pd - dd * (kd - 1) - 1)), num(0))
    do = g.add(g.div(g.sub(span, g.floor_mod(span, num(sd))), num(sd)) if sd > 1 else span, num(1))
    taps = [g.slice_sized(xt, c.size_tensor([t * dd]), c.size_tensor([g.add(num(t * dd + 1), g.mul(g.sub(do, num(1)),
                                                                                                     num(sd)))]),
                          c.size_tensor([sd]), [1]) for t in range(kd)]
    cols = g.stack(taps, 2) if kd > 1 else g.expand_dims(taps[0], [2])  # [N, Do, kd, C, H, W]
    nd = c.size_product(c.dim(x, 0), do)
    hh, ww = c.dim(x, 3), c.dim(x, 4)
    cols = c.reshape_to(cols, [nd, kd, groups, cg, hh, ww])
    cols = c.reshape_to(g.transpose(cols, [0, 2, 1, 3, 4, 5]), [nd, groups * kd * cg, hh, ww])
    y = g.conv2d(cols, w2, d)  # [N Do, O, Ho, Wo]
    y = c.reshape_to(y, [c.dim(x, 0), do, o, c.dim(y, 2), c.dim(y, 3)])
    return g.transpose(y, [0, 2, 1, 3, 4])


def _affine(c: _Ctx, weight, bias, shape, dtype):
    """A norm's scale and shift, ones and zeros where the module has none."""
    gamma = weight if weight is not None else c.g.constant(np.ones(shape, np.float32), dtype=dtype)
    beta = bias if bias is not None else c.g.constant(np.zeros(shape, np.float32), dtype=dtype)
    return gamma, beta


def _batch_statistics(c: _Ctx, x, weight, bias, eps):
    """Batch norm over the batch's own statistics (channel axis 1): (y, mean, biased var, rstd)."""
    gamma, beta = _affine(c, weight, bias, [x.shape[1]], x.dtype)
    y, mean, var = c.g.batch_norm_training(x, gamma, beta, axis=1, epsilon=eps)
    return y, mean, var, c.g.rsqrt(c.g.add(var, c.scalar(eps, var)))


def _batch_norm_no_training(c: _Ctx, x, weight, bias, mean, var, momentum, eps):
    g = c.g
    gamma, beta = _affine(c, weight, bias, [x.shape[1]], x.dtype)
    empty = g.constant(np.zeros(0, np.float32), dtype=x.dtype)  # torch returns empty statistics here
    return (g.batch_norm(x, mean, var, gamma, beta, axis=1, epsilon=eps), empty, empty)


def _batch_norm_functional(c: _Ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """The functional batch norm AOTAutograd leaves: (y, mean, rstd, new running mean, new running
    var); the running variance takes the unbiased batch variance, as torch's does."""
    g = c.g
    if not training:
        y, _, _ = _batch_norm_no_training(c, x, weight, bias, running_mean, running_var, momentum, eps)
        empty = g.constant(np.zeros(0, np.float32), dtype=x.dtype)
        return (y, empty, empty, running_mean, running_var)
    y, mean, var, rstd = _batch_statistics(c, x, weight, bias, eps)
    n = c.size_product(*(c.dim(x, a) for a in range(x.rank) if a != 1))  # (computed where a size varies)
    m = c.scalar(momentum, mean)
    keep = c.scalar(1.0 - momentum, mean)
    new_mean = g.add(g.mul(running_mean, keep), g.mul(mean, m))
    unbiased = g.mul(var, _bessel(c, var, n, 1, at_most_one=1.0))
    new_var = g.add(g.mul(running_var, keep), g.mul(unbiased, m))
    return (y, mean, rstd, new_mean, new_var)


def _batch_norm_no_stats(c: _Ctx, x, weight, bias, *rest):
    """_native_batch_norm_legit without running statistics (track_running_stats=False,
    InstanceNorm): the batch's statistics, (y, mean, rstd). Its two forms: (training, momentum,
    eps) or, with running buffers, (running_mean, running_var, training, momentum, eps)."""
    if len(rest) == 5:  # with running statistics: the functional form, minus the update
        y, mean, rstd, _, _ = _batch_norm_functional(c, x, weight, bias, *rest)
        return (y, mean, rstd)
    _training, _momentum, eps = rest
    y, mean, _, rstd = _batch_statistics(c, x, weight, bias, eps)
    return (y, mean, rstd)


def _convolution_backward(c: _Ctx, dy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask):
    """(d input, d weight, d bias) of aten.convolution, those output_mask asks for."""
    g = c.g
    nd = x.rank - 2
    if transposed and nd == 3:
        raise UnsupportedOp("[torch] the gradient of a 3-D transposed convolution")
    if nd == 1:  # as conv2d over [N, C, 1, L]
        dy, x, w = g.expand_dims(dy, [2]), g.expand_dims(x, [2]), g.expand_dims(w, [2])
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    d = tg.ConvDesc(stride=list(stride), dilation=list(dilation), explicit_padding=[p for p in padding for _ in (0, 1)],
                    groups=groups, data_layout="nchw" if nd <= 2 else "ncdhw",
                    weights_layout="oihw" if nd <= 2 else "oidhw")
    data_grad = g.conv3d_data_grad if nd == 3 else g.conv2d_data_grad
    weight_grad = g.conv3d_weight_grad if nd == 3 else g.conv2d_weight_grad
    if transposed:
        # y = conv_transpose(x, w) is the data gradient of the conv(·, w) from y's space to x's,
        # so dx is that conv of dy, and dw the conv's weight gradient with x in the role of dy
        dx = g.conv2d(dy, w, d) if output_mask[0] else None
        dw = weight_grad(x, dy, list(w.shape), d) if output_mask[1] else None
    else:
        if output_mask[0] and min(x.shape) < 0:
            if nd != 2:
                raise tg.Error(f"[torch] a 3-D convolution's input gradient to an input {list(x.shape)} whose sizes vary")
            dx = _conv_data_grad_sized(c, dy, w, x, d)
        else:
            dx = data_grad(dy, w, list(x.shape), d) if output_mask[0] else None
        dw = weight_grad(dy, x, list(w.shape), d) if output_mask[1] else None
    db = g.reduce_sum(dy, [a for a in range(dy.rank) if a != 1]) if output_mask[2] else None
    if nd == 1:
        dx = g.squeeze(dx, [2]) if dx is not None else None
        dw = g.squeeze(dw, [2]) if dw is not None else None
    return (dx, dw, db)


def _conv_data_grad_sized(c: _Ctx, dy, w, x, d: tg.ConvDesc) -> tg.Tensor:
    """A 2-D convolution's input gradient where the input's sizes vary (conv2d_data_grad takes
    them as numbers): the transposed convolution of dy without padding is the gradient over the
    padded input's positions, `full`; the input's are full's from `padding` on, zeros past its
    end (positions no window reached). Cut and padded by sizes computed in the graph, so each
    size's copy holds static ops."""
    g = c.g
    full = g.conv_transpose2d(dy, w, tg.ConvDesc(stride=list(d.stride), dilation=list(d.dilation),
                                                 explicit_padding=[0, 0, 0, 0], groups=d.groups,
                                                 data_layout="nchw", weights_layout="oihw"))
    before = [d.explicit_padding[0], d.explicit_padding[2]]
    # full zero-extended so that [before, before + x) lies inside it, then that window
    ends = [g.add(c.dim_scalar(x, 2 + k), c.size_scalar(before[k])) for k in range(2)]
    extra = [g.maximum(g.sub(ends[k], c.dim_scalar(full, 2 + k)), c.size_scalar(0)) for k in range(2)]
    grown = g.pad_sized(full, c.size_tensor([0] * 6 + extra), mode="constant", constant=0.0)
    return g.slice_sized(grown, c.size_tensor(before), c.size_tensor(ends), c.size_tensor([1, 1]), [2, 3])


def _max_pool2d_backward(c: _Ctx, dy, x, kernel, stride, padding, dilation, ceil_mode, indices=None):
    # tgraph recomputes each window's first maximum, the one torch's indices hold (so
    # tgraph::max_pool2d_backward_from_input, which has none, converts the same way)
    return c.g.max_pool2d_grad(dy, x, _pool_desc(kernel, stride, padding, dilation, ceil_mode))


def _used_outputs(c: _Ctx) -> set:
    """Which elements of this node's tuple result the graph reads."""
    return {u.args[1] for u in c.node.users if u.target is operator.getitem}


def _layer_norm(c: _Ctx, x, normalized_shape, weight, bias, eps):
    """(y, mean, rstd): the statistics only when read (AOTAutograd saves them for backward),
    shaped as torch's, with the normalised dims kept as 1s."""
    g = c.g
    shape = list(normalized_shape)
    axis = x.rank - len(shape)
    gamma, beta = _affine(c, weight, bias, shape, x.dtype)
    y = g.layer_norm(x, gamma, beta, axis=axis, epsilon=eps)
    if not _used_outputs(c) & {1, 2}:
        return (y, None, None)
    axes = list(range(axis, x.rank))
    mean = g.reduce_mean(x, axes, True)
    rstd = g.rsqrt(g.add(g.reduce_variance(x, axes, True), c.scalar(eps, x)))
    return (y, mean, rstd)


def _group_norm(c: _Ctx, x, weight, bias, n, ch, hw, groups, eps):
    """(y, mean, rstd) of aten.native_group_norm; the statistics [N, groups] only when read."""
    g = c.g
    gamma, beta = _affine(c, weight, bias, [ch], x.dtype)
    y = g.group_norm(x, gamma, beta, groups, axis=1, epsilon=eps)
    if not _used_outputs(c) & {1, 2}:
        return (y, None, None)
    flat = g.reshape(x, [n, groups, -1])
    mean = g.reduce_mean(flat, [2], False)
    rstd = g.rsqrt(g.add(g.reduce_variance(flat, [2], False), c.scalar(eps, x)))
    return (y, mean, rstd)


def _pool_desc(kernel, stride, padding, dilation, ceil_mode, count_include_pad=False):
    kernel = list(kernel) * (2 if len(kernel) == 1 else 1)
    stride = list(stride or kernel) * (2 if stride and len(stride) == 1 else 1)
    padding = list(padding) * (2 if len(padding) == 1 else 1)
    dilation = list(dilation) * (2 if len(dilation) == 1 else 1)
    return tg.PoolDesc(kernel=kernel, stride=stride, dilation=dilation,
                       explicit_padding=[p for p in padding for _ in (0, 1)], data_layout="nchw",
                       ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))


def _max_pool2d_with_indices(c: _Ctx, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    d = _pool_desc(kernel, stride, padding, dilation, ceil_mode)
    if 1 in _used_outputs(c):
        y, i = c.g.max_pool2d_with_indices(x, d)
        return (y, c.g.cast(i, tg.i64))
    return (c.g.max_pool2d(x, d), None)


def _avg_pool2d(c: _Ctx, x, kernel, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if divisor_override is not None:
        raise UnsupportedOp("[torch] avg_pool2d with divisor_override")
    return c.g.avg_pool2d(x, _pool_desc(kernel, stride, padding, (1,), ceil_mode, count_include_pad))


def _addmm(c: _Ctx, bias, a, b, beta=1, alpha=1):
    g = c.g
    y = g.matmul(a, b)
    if alpha != 1:
        y = g.mul(y, c.scalar(alpha, y))
    if beta == 0:
        return y
    return g.add(y, bias if beta == 1 else g.mul(bias, c.scalar(beta, bias)))


def _scaled_mm(c: _Ctx, a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
               use_fast_accum=False):
    """torch._scaled_mm with per-tensor scales: tgraph's scaled_matmul (FP8 tensor cores on CUDA)."""
    out = tg_dtype(out_dtype) if out_dtype is not None else a.dtype
    if scale_result is not None or out not in (tg.f32, tg.f16, tg.bf16):
        raise tg.Error(f"[torch] _scaled_mm to {out} (an 8-bit result) is not supported: give out_dtype "
                       "float32, float16 or bfloat16")
    for s in (scale_a, scale_b):
        if math.prod(tuple(s.shape)) != 1:
            raise tg.Error(f"[torch] _scaled_mm with a scale of shape {list(s.shape)}: only per-tensor scales "
                           "(one element) are supported")
    y = c.g.scaled_matmul(a, b, c.cast(scale_a, tg.f32), c.cast(scale_b, tg.f32), out)
    return y if bias is None else c.g.add(y, c.cast(bias, out))


def _traced_shape(c: _Ctx, shape):
    """The node's result shape as torch traced it (its -1 resolved), else `shape`."""
    v = c.node.meta.get("val") if c.node is not None else None
    return list(v.shape) if isinstance(v, torch.Tensor) and len(v.shape) == len(shape) else list(shape)


def _input_dims(c: _Ctx, x) -> dict:
    """The symbolic dims of the node's first input x as torch traced them: expression -> (x,
    dim). A derived size (a strided convolution's (h - 1) // 2 + 1) is no fed tensor's dim, but a
    view that keeps it (a channel shuffle's [b, g, c / g, h, w]) names it as x's."""
    v = c.node.args[0].meta.get("val") if c.node is not None and c.node.args and \
        isinstance(c.node.args[0], torch.fx.Node) else None
    if not isinstance(v, torch.Tensor) or len(v.shape) != x.rank:
        return {}
    return {_sym_expr(d): (x, i) for i, d in enumerate(v.shape) if x.shape[i] < 0 and _is_dynamic(d)}


def _view(c: _Ctx, x, shape):
    traced = _traced_shape(c, shape)
    codes, sources = c.dims(traced, known=_input_dims(c, x))
    if codes.count(None) + codes.count(-1) > 1:  # products of sizes: computed in the graph, per size
        return c.g.reshape_sized(x, c.size_tensor(traced))
    codes = [-1 if d is None else d for d in codes]
    return c.g.reshape(x, codes, sources)


def _expand(c: _Ctx, x, shape, implicit=False):
    codes, sources = c.dims(list(shape), like=x)
    if None in codes:  # computed in the graph, per size (-1, "x's own dim", as 1: bidirectional)
        return c.g.broadcast_to_sized(x, c.size_tensor([1 if _sym_expr(s) == -1 else s for s in shape]))
    return c.g.broadcast_to(x, codes, sources)


def _squeeze(c: _Ctx, x, dims=None):
    axes = [a for a in _axes(dims, x.rank) if x.shape[a] == 1]
    return c.g.squeeze(x, axes) if axes or dims is None else c.g.identity(x)


def _select(c: _Ctx, x, dim, index):
    dim %= x.rank
    # (from the end of a dynamic dim: strided_slice's squeezed index counts from the end too)
    index = index % x.shape[dim] if x.shape[dim] > 0 else int(index)
    begin = [0] * x.rank
    end = [0] * x.rank
    begin[dim], end[dim] = index, index + 1
    mask = ((1 << x.rank) - 1) & ~(1 << dim)
    return c.g.strided_slice(x, tg.SliceDesc(begin=begin, end=end, strides=[1] * x.rank, begin_mask=mask,
                                             end_mask=mask, squeeze_mask=1 << dim))


def _slice(c: _Ctx, x, dim=0, start=None, end=None, step=1):
    dim %= x.rank
    if end is not None and _is_dynamic(end):  # an end torch knows is at or past the dim's size (s + 1 of s): to the end
        v = c.node.args[0].meta.get("val") if c.node is not None and isinstance(c.node.args[0], torch.fx.Node) \
            else None
        if isinstance(v, torch.Tensor) and len(v.shape) == x.rank:
            past = _sym_expr(end) - _sym_expr(v.shape[dim])
            if past == 0 or getattr(past, "is_nonnegative", None) is True:
                end = None
    if end is not None and _is_dynamic(end) and (start in (None, 0)) and step == 1:
        (code,), sources = c.dims([end])
        if code is not None:  # (an end no dim names is computed from sizes, below)
            if x.shape[dim] < 0 and sources and c.sym_sources.get(_sym_expr(end), (None,))[0] is x:
                return x  # the whole dynamic dim
            # x[..., :n, ...] with n known at run time: the first n along dim, gathered
            return c.g.gather(x, _iota(c, code, sources), dim)
    if any(v is not None and _is_dynamic(v) for v in (start, end, step)):  # bounds computed from sizes
        return c.g.slice_sized(x, c.size_tensor([0 if start is None else start]),
                               c.size_tensor([2 ** 63 - 1 if end is None else end]), c.size_tensor([step]), [dim])
    return c.g.strided_slice(x, _slice_desc(x, dim, start, end, step))


def _slice_desc(x: tg.Tensor, dim: int, start, end, step) -> tg.SliceDesc:
    """torch's x[..., start:end:step, ...] on dim, clamped as torch clamps."""
    n = x.shape[dim]
    if n < 0:  # a dynamic dim: torch's clamping is strided_slice's for a positive step (a
        # negative index counts from the end, both clamped to [0, n]), resolved at each size
        start = int(0 if start is None else start)
        whole_end = end is None or int(end) >= 2 ** 62
        if step < 1:
            raise tg.Error(f"[torch] slice {start}:{end}:{step} of a dynamic dim")
        b, e, s = [0] * x.rank, [0] * x.rank, [1] * x.rank
        b[dim], s[dim] = start, step
        if not whole_end:
            e[dim] = int(end)
        mask = ((1 << x.rank) - 1) & ~(1 << dim)
        return tg.SliceDesc(begin=b, end=e, strides=s, begin_mask=mask,
                            end_mask=mask | (1 << dim) if whole_end else mask)
    start = 0 if start is None else start
    end = n if end is None else end
    start = max(0, min(n, start + n if start < 0 else start))
    end = max(start, min(n, end + n if end < 0 else end))
    b, e, s = [0] * x.rank, [0] * x.rank, [1] * x.rank
    b[dim], e[dim], s[dim] = start, end, step
    mask = ((1 << x.rank) - 1) & ~(1 << dim)
    return tg.SliceDesc(begin=b, end=e, strides=s, begin_mask=mask, end_mask=mask)


def _slice_scatter(c: _Ctx, x, src, dim=0, start=None, end=None, step=1):
    dim %= x.rank
    if _is_dynamic(end) and start in (None, 0) and step == 1 and x.shape[dim] >= 0:
        # x with its first n rows along dim from src, n known at run time: each row picks
        g, n = c.g, x.shape[dim]
        i64 = lambda v: c.tensor(v, dtype=tg.i64)  # noqa: E731
        rows = g.arange(0.0, float(n), 1.0, tg.i64)
        count = g.gather(g.shape_of(src), i64(dim))
        taken = g.gather(c.cast(src, x.dtype), g.minimum(rows, g.maximum(g.sub(count, i64(1)), i64(0))), dim)
        keep = g.reshape(g.less(rows, count), [n if d == dim else 1 for d in range(x.rank)])
        return g.select(keep, taken, x)
    if step == 1 and (x.shape[dim] < 0 or any(v is not None and _is_dynamic(v) for v in (start, end))):
        return _slice_scatter_sized(c, x, c.cast(src, x.dtype), dim, start, end)
    return c.g.slice_update(x, c.cast(src, x.dtype), _slice_desc(x, dim % x.rank, start, end, step))


def _slice_scatter_sized(c: _Ctx, x, src, dim: int, start, end):
    """x with src written over [start, end) along dim, bounds (Python's: negative from the end,
    clamped) computed in the graph where they or the dim vary (GPT-2's shifted-logits gradient
    over a varying length): src padded to x's size there, chosen where a row is inside."""
    g = c.g
    i64 = c.size_scalar
    n = i64(c.dim(x, dim))

    def bound(v, default):
        if v is None or (not _is_dynamic(v) and int(v) >= 2 ** 62):
            return default
        t = c.size_scalar(v)
        t = g.select(g.less(t, i64(0)), g.add(t, n), t)
        return g.minimum(g.maximum(t, i64(0)), n)
    b = bound(start, i64(0))
    e = g.maximum(bound(end, n), b)
    pads = [b if d == dim else 0 for d in range(x.rank)] + [g.sub(n, e) if d == dim else 0 for d in range(x.rank)]
    placed = g.pad_sized(src, c.size_tensor(pads), mode="constant", constant=0.0)
    rows = g.arange_sized(i64(0), n, i64(1), tg.i64)
    inside = g.logical_and(g.greater_equal(rows, b), g.less(rows, e))
    inside = c.reshape_to(inside, [c.dim(x, d) if d == dim else 1 for d in range(x.rank)])
    return g.select(inside, placed, x)


class _AdvancedIndex(NamedTuple):
    """x[i0, i1, ...] with index tensors (None: the whole dim), by numpy's rules: `xt` is x with
    the indexed dims moved to the front, `idx` the broadcast indices stacked for gather_nd /
    scatter_nd (negative ones counted from the end), `shape` their broadcast shape, `back` the
    permutation of [shape, other dims] into numpy's result order (None: already in it), `perm`
    the permutation that made xt from x."""
    xt: tg.Tensor
    idx: tg.Tensor
    shape: list
    back: list | None
    perm: list


def _advanced_index(c: _Ctx, x, indices, what: str) -> _AdvancedIndex:
    g = c.g
    indices = list(indices) + [None] * (x.rank - len(indices))
    adv = [d for d, i in enumerate(indices) if i is not None]
    if not adv:
        raise UnsupportedOp(f"[torch] {what} without an index tensor")
    if any(indices[d].dtype == tg.bool_ for d in adv):
        raise UnsupportedOp(f"[torch] {what} with a boolean mask (its size is data-dependent)")
    dynamic = any(min(indices[d].shape, default=0) < 0 for d in adv) or min(x.shape, default=0) < 0
    if dynamic:  # sizes known at run time: broadcast by tgraph's own rules, wrap by x's run-time dims
        zero = None
        for d in adv:
            z = g.mul(c.cast(indices[d], tg.i64), c.tensor(0, dtype=tg.i64))
            zero = z if zero is None else g.add(zero, z)
        shape = list(zero.shape)
    else:
        shape = list(np.broadcast_shapes(*[tuple(indices[d].shape) for d in adv]))
    cols = []
    for d in adv:
        i = c.cast(indices[d], tg.i64)
        n = g.gather(g.shape_of(x), c.tensor(d, dtype=tg.i64)) if x.shape[d] < 0 else c.tensor(x.shape[d], i)
        i = g.select(g.less(i, c.tensor(0, i)), g.add(i, n), i)
        cols.append(g.add(i, zero) if dynamic else g.broadcast_to(i, shape) if list(i.shape) != shape else i)
    rest = [d for d in range(x.rank) if d not in adv]
    perm = adv + rest
    xt = g.transpose(x, perm) if perm != list(range(x.rank)) else x
    nb, p = len(shape), adv[0]
    back = None
    if adv == list(range(p, p + len(adv))) and p > 0:  # adjacent index dims stay where they were
        back = list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, nb + len(rest)))
    return _AdvancedIndex(xt, g.stack(cols, nb), shape, back, perm)


def _index(c: _Ctx, x, indices):
    """x[i0, i1, ...] (aten.index): gather_nd over the indexed dims moved to the front."""
    a = _advanced_index(c, x, indices, "indexing")
    y = c.g.gather_nd(a.xt, a.idx)  # [shape, other dims]
    return c.g.transpose(y, a.back) if a.back else y


def _row_major_view(c: _Ctx, x, size, stride, storage_offset) -> bool:
    """Whether as_strided(x, size, stride, offset) is a reshape: every element of x once, in
    row-major order (dims of size 1 may have any stride), over storage laid out as x is. Sizes
    and strides may be symbolic (dynamic shapes: a channels-last model's flatten after its pool
    is as_strided(mean, [s0, 2048, 1, 1], ...)): compared as torch's expressions."""
    src = c.node.args[0].meta.get("val") if isinstance(c.node.args[0], torch.fx.Node) else None
    # as_strided reads the input's storage: a reshape only when that storage is the row-major
    # layout of the logical tensor
    if not (isinstance(src, torch.Tensor) and src.is_contiguous() and src.storage_offset() == 0):
        return False
    if _sym_expr(storage_offset or 0) != 0:
        return False
    size = [_sym_expr(v) for v in size]
    stride = [_sym_expr(v) for v in stride]
    expect, acc = [0] * len(size), 1
    for d in range(len(size) - 1, -1, -1):
        expect[d] = acc
        acc = acc * size[d]
    n = acc
    numel = 1
    for v in src.shape:
        numel = numel * _sym_expr(v)

    def equal(a, b) -> bool:
        diff = a - b
        return diff == 0 or getattr(diff, "is_zero", False) is True or \
            (hasattr(diff, "expand") and diff.expand() == 0)
    same = all(equal(sz, 1) or equal(st, ex) for sz, st, ex in zip(size, stride, expect))
    return equal(n, numel) and same


def _as_strided(c: _Ctx, x, size, stride, storage_offset=0):
    """Only the form decompositions leave that is a reshape (_row_major_view)."""
    if not _row_major_view(c, x, size, stride, storage_offset):
        raise UnsupportedOp(f"[torch] as_strided with size {list(size)}, stride {list(stride)} is not a reshape")
    return _view(c, x, list(size))


def _as_strided_scatter(c: _Ctx, x, src, size, stride, storage_offset=0):
    """x with its as_strided view replaced by src: when that view is all of x in row-major order
    (functionalised in-place updates of a reshaped tensor), src reshaped to x."""
    if not _row_major_view(c, x, size, stride, storage_offset):
        raise UnsupportedOp(f"[torch] as_strided_scatter with size {list(size)}, stride {list(stride)} "
                            "is not a whole-tensor reshape")
    return c.g.reshape(c.cast(src, x.dtype), list(x.shape))


def _cat(c: _Ctx, xs, dim=0):
    xs = [x for x in xs if not (x.rank == 1 and x.shape[0] == 0)]  # torch allows empty 1-D pieces
    t = c.out_dtype
    return c.g.concat([c.cast(x, t) for x in xs], dim % xs[0].rank)


def _pieces(c: _Ctx, x, dim: int, lengths) -> tuple:
    """x cut along dim into consecutive pieces of `lengths` (numbers or torch's sizes), the last
    the rest: slices whose bounds are computed in the graph where a size varies."""
    out, start = [], 0
    for k, n in enumerate(lengths):
        end = None if k == len(lengths) - 1 else _sym_expr(start) + _sym_expr(n)
        end = end if end is None or not _is_dynamic(end) else Sym(end)
        out.append(_slice(c, x, dim, start, end, 1))
        start = end
    return tuple(out)


def _split_with_sizes(c: _Ctx, x, sizes, dim=0):
    dim %= x.rank
    if x.shape[dim] < 0 or any(_is_dynamic(n) for n in sizes):
        return _pieces(c, x, dim, list(sizes))
    return tuple(c.g.split(x, [int(n) for n in sizes], dim))


def _split(c: _Ctx, x, size, dim=0):
    dim %= x.rank
    n = x.shape[dim]
    if n < 0 or _is_dynamic(size):  # as many pieces as torch traced (it guards their count)
        return _pieces(c, x, dim, [size] * len(c.node.meta["val"]))
    sizes = [size] * (n // size) + ([n % size] if n % size else [])
    return tuple(c.g.split(x, sizes, dim))


def _softmax(op: str):
    def conv(c: _Ctx, x, dim, half_to_float=False):
        return c.cast(getattr(c.g, op)(x, dim % x.rank), c.out_dtype)
    return conv


def _gelu(c: _Ctx, x, approximate="none"):
    return c.g.gelu_tanh(x) if approximate == "tanh" else c.g.gelu(x)


def _to_copy(c: _Ctx, x, dtype=None, **kw):
    return c.cast(x, c.out_dtype) if c.out_dtype is not None else c.g.identity(x)


def _broadcast_like(c: _Ctx, x: tg.Tensor, like: tg.Tensor) -> tg.Tensor:
    if tuple(x.shape) == tuple(like.shape) and min(like.shape, default=0) >= 0:
        return x
    # (sizes that vary: like's at run time; broadcast_to would take its -1s as sizes)
    return c.g.broadcast_to(x, list(like.shape)) if min(like.shape, default=0) >= 0 else c.g.broadcast_like(x, like)


def _full(c: _Ctx, shape, value, **kw):
    t = c.out_dtype or tg.f32
    if not len(shape):
        return c.g.scalar(float(value), t)
    codes, sources = c.dims(list(shape))
    if None in codes:  # computed in the graph, per size
        return c.g.broadcast_to_sized(c.g.scalar(float(value), t), c.size_tensor(list(shape)))
    return c.g.broadcast_to(c.g.scalar(float(value), t), codes, sources)


def _full_like(c: _Ctx, x, value, **kw):
    t = c.out_dtype or x.dtype
    if not x.rank:
        return c.g.scalar(float(value), t)
    v = c.g.scalar(float(value), t)
    return c.g.broadcast_to(v, list(x.shape)) if min(x.shape) >= 0 else c.g.broadcast_like(v, x)


def _where(c: _Ctx, cond, a, b):
    x, y = c.operands(a, b, c.out_dtype)
    return c.g.select(cond, x, y)


def _clamp(c: _Ctx, x, lo=None, hi=None):
    t = c.out_dtype or x.dtype
    x = c.cast(x, t)
    lo_t = c.tensor(lo if lo is not None else -np.inf if t in (tg.f32, tg.f64, tg.f16, tg.bf16) else
                    np.iinfo(tg.numpy_dtype(t)).min, x)
    hi_t = c.tensor(hi if hi is not None else np.inf if t in (tg.f32, tg.f64, tg.f16, tg.bf16) else
                    np.iinfo(tg.numpy_dtype(t)).max, x)
    return c.g.clamp(x, c.cast(lo_t, t), c.cast(hi_t, t))


def _pow(c: _Ctx, a, b):
    if not isinstance(b, tg.Tensor) and b == 2:
        return c.g.square(c.cast(a, c.out_dtype))
    if not isinstance(b, tg.Tensor) and b == 0.5:
        return c.g.sqrt(c.cast(a, c.out_dtype))
    x, y = c.operands(a, b, c.out_dtype)
    return c.g.pow(x, y)


def _embedding(c: _Ctx, weight, indices, padding_idx=-1, scale_grad=False, sparse=False):
    return c.g.gather(weight, indices, axis=0)


def _constant_pad_nd(c: _Ctx, x, pad, value=0.0):
    before = [0] * x.rank
    after = [0] * x.rank
    for i in range(len(pad) // 2):  # torch pads the last dim first
        before[x.rank - 1 - i], after[x.rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    if any(_is_dynamic(p) for p in pad):  # by sizes (Swin's window padding): known per size
        return c.g.pad_sized(x, c.size_tensor(before + after), mode="constant", constant=float(value))
    if min(before + after) < 0:  # negative padding crops (Swin's backward of its window padding)
        dims = list(x.shape)
        if any(dims[d] < 0 for d in range(x.rank) if before[d] < 0 or after[d] < 0):
            raise UnsupportedOp("[torch] constant_pad_nd cropping a dynamic dim")
        x = c.g.slice(x, [max(0, -b) for b in before], [dims[d] - max(0, -after[d]) for d in range(x.rank)])
        before, after = [max(0, b) for b in before], [max(0, a) for a in after]
        if max(before + after) == 0:
            return x
    return c.g.pad(x, before, after, mode="constant", constant=float(value))


def _bessel(c: _Ctx, like: tg.Tensor, n, corr, at_most_one: float | None = None) -> tg.Tensor:
    """n / (n - corr) as a scalar of like's type, for n values (a number, or a 0-D i64 tensor
    where a size varies); where n <= corr, `at_most_one` divided by (n - corr)'s floor of 1 as
    the batch norm's running variance has it, else NaN (torch's variance without a degree of
    freedom)."""
    if not isinstance(n, tg.Tensor):
        if n > corr:
            return c.scalar(n / (n - corr), like)
        return c.scalar(n / at_most_one if at_most_one is not None else float("nan"), like)
    g = c.g
    nf = c.cast(n, like.dtype)
    extra = c.scalar(float(corr), nf)
    factor = g.div(nf, g.sub(nf, extra))
    instead = g.div(nf, c.scalar(at_most_one, nf)) if at_most_one is not None else c.scalar(float("nan"), nf)
    return g.select(g.less_equal(nf, extra), instead, factor)


def _var(c: _Ctx, x, dims=None, correction=None, keepdim=False, **kw):
    axes = _axes(dims, x.rank)
    n = c.size_product(*(c.dim(x, a) for a in axes))  # (computed where a size varies)
    corr = 1 if correction is None else correction
    v = c.g.reduce_variance(x, axes, keepdim)
    if corr == 0:
        return v
    return c.g.mul(v, _bessel(c, v, n, corr))  # torch: NaN without a degree of freedom


def _argminmax(op: str):
    def conv(c: _Ctx, x, dim=None, keepdim=False):
        if dim is None:
            x, dim = c.g.reshape(x, [-1]), 0
        return c.cast(getattr(c.g, op)(x, dim % x.rank, keepdim), tg.i64)
    return conv


def _topk(c: _Ctx, x, k, dim=-1, largest=True, sorted=True):
    v, i = c.g.top_k(x, k, dim % x.rank, largest)
    return (v, c.cast(i, tg.i64))


def _sort(c: _Ctx, x, dim=-1, descending=False, stable=False):
    d = dim % x.rank
    return (c.g.sort(x, d, descending), c.cast(c.g.argsort(x, d, descending), tg.i64))


def _index_select(c: _Ctx, x, dim, index):
    return c.g.gather(x, index, axis=dim % x.rank)


def _gather(c: _Ctx, x, dim, index, sparse_grad=False):
    return c.g.gather_along_axis(x, index, dim % x.rank)


def _cumsum(c: _Ctx, x, dim, dtype=None):
    return c.g.cumsum(c.cast(x, c.out_dtype), dim % x.rank)


def _leaky_relu(c: _Ctx, x, slope=0.01):
    return c.g.leaky_relu(x, slope)


def _elu(c: _Ctx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1.0 or input_scale != 1.0:
        raise UnsupportedOp("[torch] elu with scale / input_scale (selu)")
    return c.g.elu(x, alpha)


def _hardtanh(c: _Ctx, x, lo=-1.0, hi=1.0):
    return _clamp(c, x, lo, hi)


def _repeat(c: _Ctx, x, reps):
    """x.repeat(reps): a tile, with leading axes of 1 where reps has more; counts that are sizes
    (Bloom repeats its ALiBi table by the batch) computed in the graph (tile_sized)."""
    if len(reps) > x.rank:
        x = c.g.expand_dims(x, list(range(len(reps) - x.rank)))
    if any(_is_dynamic(r) for r in reps):
        return c.g.tile_sized(x, c.size_tensor(reps))
    return c.g.tile(x, [int(r) for r in reps])


def _scalar_tensor(c: _Ctx, v, **kw):
    if isinstance(v, Sym):  # a size made a tensor (decompositions that compute with sizes)
        return c.tensor(v, dtype=c.out_dtype or tg.f32)
    return c.g.scalar(float(v), c.out_dtype or tg.f32)


def _arange(c: _Ctx, start, end=None, step=1, **kw):
    if end is None:
        start, end = 0, start
    t = c.out_dtype or tg.i64
    if any(_is_dynamic(v) for v in (start, end, step)):
        # a length known at run time: start + step * (0, 1, ..., n - 1), n as torch traced it
        (code,), sources = c.dims(_traced_shape(c, [end]))
        if code is None or _is_dynamic(start) or _is_dynamic(step):  # bounds computed in the graph
            return c.g.arange_sized(c.size_scalar(start), c.size_scalar(end), c.size_scalar(step), t)
        return c.g.add(c.g.mul(c.cast(_iota(c, code, sources), t), c.tensor(step, dtype=t)), c.tensor(start, dtype=t))
    return c.g.arange(float(start), float(end), float(step), t)


def _iota(c: _Ctx, code: int, sources: list) -> tg.Tensor:
    """0, 1, ..., n - 1 (i64) for a length n that is dim code of the sources (_Ctx.dims)."""
    one = c.g.constant(np.array(1, np.int64))
    return c.g.sub(c.g.cumsum(c.g.broadcast_to(one, [code], sources), 0), one)


def _sdpa(c: _Ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kw):
    """F.scaled_dot_product_attention (inference: no dropout). With enable_gqa, each group of
    q's heads shares one of k's and v's (grouped-query attention): k and v are repeated to q's
    head count, as torch does."""
    if dropout_p:
        raise tg.Error(f"[torch] scaled_dot_product_attention with dropout_p={dropout_p}: only inference is converted")
    if enable_gqa and q.rank >= 3 and (k.shape[-3] != q.shape[-3] or k.shape[-3] < 0):
        a = q.rank - 3
        hq, hk = c.dim(q, a), c.dim(k, a)  # (head counts that vary: their ratio computed in the graph)
        fixed = not isinstance(hq, tg.Tensor) and not isinstance(hk, tg.Tensor)
        if fixed and (hk <= 0 or hq % hk):
            raise tg.Error(f"[torch] scaled_dot_product_attention: {hq} query heads over {hk} key heads")
        group = hq // hk if fixed else c.g.div(c.size_scalar(hq), c.size_scalar(hk))

        def repeat(t):  # each key / value head over its group of query heads
            s = [c.dim(t, i) for i in range(t.rank)]
            r = s[:-3] + [hk, 1] + s[-2:]
            return c.reshape_to(c.broadcast_dims(c.reshape_to(t, r), s[:-3] + [hk, group] + s[-2:]),
                                s[:-3] + [hq] + s[-2:])
        k, v = repeat(k), repeat(v)
    return c.g.scaled_dot_product_attention(q, k, v, attn_mask, tg.AttentionDesc(scale=scale or 0.0,
                                                                                  causal=bool(is_causal)))


def _linear(c: _Ctx, x, weight, bias=None):
    """aten.linear as torch.export leaves it (before decomposition): x @ weight^T + bias, over
    x's rows as one 2-D product, the form the decomposition's view / addmm / view gives."""
    g = c.g
    if x.rank == 2 or any(d < 0 for d in x.shape):
        y = g.matmul(x, g.transpose(weight, [1, 0]))
        return y if bias is None else g.add(y, bias)
    n = 1
    for d in x.shape[:-1]:
        n *= d
    rows = g.reshape(x, [n, x.shape[-1]])
    wt = g.transpose(weight, [1, 0])
    y = g.matmul(rows, wt) if bias is None else _addmm(c, bias, rows, wt)
    return g.reshape(y, list(x.shape[:-1]) + [weight.shape[0]])


def _native_dropout(c: _Ctx, x, p, train=True):
    """(y, mask): torch's dropout in training (inverted scaling); a fresh mask every run."""
    if train is False or p == 0:  # ATen: train=None means training
        return (x, _broadcast_like(c, c.g.scalar(1.0, tg.bool_), x) if x.rank else c.g.scalar(1.0, tg.bool_))
    if min(x.shape, default=0) < 0:  # sizes that vary: the dropout op's mask
        keep = c.keep_mask(x, float(p))
    else:
        keep = c.g.greater_equal(c.random_uniform(x.shape), c.g.scalar(float(p), tg.f32))
    scaled = c.g.mul(x, c.scalar(1.0 / (1.0 - p), x)) if p < 1 else c.g.mul(x, c.scalar(0.0, x))
    return (c.g.select(keep, scaled, c.g.mul(x, c.scalar(0.0, x))), keep)


def _bernoulli(c: _Ctx, x, p=None, generator=None):
    """bernoulli(x) (probabilities x) or bernoulli(x, p) (a number or a tensor): 1 with that
    probability, in the result's type."""
    if min(x.shape, default=0) < 0 and p is not None and not isinstance(p, tg.Tensor):
        return c.cast(c.keep_mask(x, 1.0 - float(p)), c.out_dtype or x.dtype)  # sizes that vary
    prob = x if p is None else p if isinstance(p, tg.Tensor) else c.tensor(float(p), dtype=tg.f32)
    u = c.random_uniform(x.shape)
    hit = c.g.less(u, c.cast(prob, tg.f32))
    return c.cast(hit, c.out_dtype or x.dtype)


def _rand(c: _Ctx, shape, *args, **kwargs):
    """rand: uniform [0, 1) from the run's random stream, in the result's type."""
    return c.cast(c.random_uniform(shape), c.out_dtype or tg.f32)


def _randn(c: _Ctx, shape, *args, **kwargs):
    """randn: standard normal values from the run's random stream (Box-Muller on two uniforms)."""
    g = c.g
    u1 = g.sub(c.tensor(1.0, dtype=tg.f32), c.random_uniform(shape))  # (0, 1]: log is finite
    u2 = c.random_uniform(shape)
    r = g.sqrt(g.mul(g.log(u1), c.tensor(-2.0, dtype=tg.f32)))
    z = g.mul(r, g.cos(g.mul(u2, c.tensor(2 * np.pi, dtype=tg.f32))))
    return c.cast(z, c.out_dtype or tg.f32)


def _uniform(c: _Ctx, x, low=0.0, high=1.0, generator=None):
    """uniform (the functional form of Tensor.uniform_): values in [low, high) of x's shape and
    type from the run's random stream."""
    g = c.g
    u = c.random_uniform(x.shape)
    if (low, high) != (0.0, 1.0):
        u = g.add(g.mul(u, c.tensor(float(high) - float(low), dtype=tg.f32)), c.tensor(float(low), dtype=tg.f32))
    return c.cast(u, x.dtype)


def _weight_norm_backward(c: _Ctx, grad_w, v, g_, norms, dim):
    """_weight_norm_interface_backward: the gradients of w = g * v / ||v|| (norms over every
    dim but `dim`, kept as size 1) -> (grad_v, grad_g): grad_g = sum(grad_w * v) / ||v|| over
    those dims, grad_v = g / ||v|| * (grad_w - v * grad_g / ||v||)."""
    g = c.g
    axes = [d for d in range(v.rank) if d != dim % v.rank]
    grad_g = g.div(g.reduce_sum(g.mul(grad_w, v), axes, True), norms)
    grad_v = g.mul(g.div(g_, norms), g.sub(grad_w, g.div(g.mul(v, grad_g), norms)))
    return grad_v, c.cast(grad_g, g_.dtype)


def _empty(c: _Ctx, shape, *args, **kwargs):
    """Uninitialised memory in torch; zeros here (a value every reader must overwrite anyway)."""
    return _full(c, shape, 0)


def _index_put(c: _Ctx, x, indices, values, accumulate=False):
    """x[i0, i1, ...] = values (or += with accumulate, duplicates summed), numpy's advanced
    indexing as _index reads it: the indexed dims are moved to the front, scatter_nd writes, and
    the dims go back (embedding and upsampling gradients use it)."""
    g = c.g
    a = _advanced_index(c, x, indices, "index_put")
    front = list(a.shape) + list(a.xt.shape[a.idx.shape[-1]:])  # [shape, other dims]
    # values are laid out as x[indices] is; scatter_nd takes them with the index dims first
    res_shape = [front[i] for i in a.back] if a.back else front
    v = c.cast(c.tensor(values, x), x.dtype)
    if list(v.shape) != res_shape:
        if min(res_shape, default=0) < 0:  # (broadcast_to would take the -1s as sizes)
            raise tg.Error(f"[torch] index_put of values {list(v.shape)} into places {res_shape} whose sizes vary")
        v = g.broadcast_to(v, res_shape)
    if a.back:
        v = g.transpose(v, list(np.argsort(a.back)))
    y = g.scatter_nd(a.xt, a.idx, v, mode="add" if accumulate else "set")
    moved = a.perm != list(range(x.rank))
    return g.transpose(y, list(np.argsort(a.perm))) if moved else y


def _avg_pool2d_backward(c: _Ctx, dy, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    if divisor_override is not None:
        raise UnsupportedOp("[torch] avg_pool2d_backward with divisor_override")
    return c.g.avg_pool2d_grad(dy, x, _pool_desc(kernel, stride, padding, (1,), ceil_mode, count_include_pad))


def _along_axis(c: _Ctx, x, axis: int, m: np.ndarray):
    """x with axis `axis` mapped through the [n_in, n_out] matrix m (y[.., j, ..] = sum_i x[.., i, ..]
    m[i, j]): a gather where every output reads one input with weight 1 (nearest neighbours),
    else a matmul over that axis."""
    g = c.g
    n_in, n_out = m.shape
    if n_in == n_out and np.array_equal(m, np.eye(n_in)):
        return x
    if np.all((m == 0) | (m == 1)) and np.all(m.sum(0) == 1):
        idx = g.constant(np.argmax(m, 0).astype(np.int64))
        return g.gather(x, idx, axis=axis)
    # a dynamic batch (-1) is what the reshapes infer; two dynamic sizes they cannot
    before = -1 if any(d < 0 for d in x.shape[:axis]) else int(np.prod(x.shape[:axis]))
    after = -1 if any(d < 0 for d in x.shape[axis + 1:]) else int(np.prod(x.shape[axis + 1:]))
    shape = list(x.shape)
    shape[axis] = n_out
    if shape.count(-1) > 1 or (before < 0 and after < 0):
        raise tg.Error(f"[torch] a separable map (interpolation, adaptive pooling) of {list(x.shape)}: "
                       "more than one dynamic size")
    if after == 1:
        y = g.matmul(g.reshape(x, [before, n_in]), g.constant(m.astype(np.float32), dtype=x.dtype))
    else:
        y = g.matmul(g.constant(np.ascontiguousarray(m.T).astype(np.float32), dtype=x.dtype),
                     g.reshape(x, [before, n_in, after]))
    return g.reshape(y, shape)


def _separable(c: _Ctx, x, probe_axis: Callable[[int, int], torch.Tensor]):
    """x through a linear map that acts on each spatial axis (dims 2..) on its own, as
    interpolation and adaptive average pooling do: probe_axis(k, n) runs torch's own op on an
    identity [n, 1, 2.., n, ..2] (axis k carries it, every other axis has size 2 in and out: torch's
    antialiased kernels mishandle size 1) and gives that axis's matrix, so every mode, scale and
    corner rule is torch's."""
    y = c.cast(x, c.out_dtype or x.dtype)
    nd = x.rank - 2
    for k in range(nd):
        y = _along_axis(c, y, 2 + k, _axis_matrix(probe_axis, k, x.shape[2 + k], nd))
    return y


def _axis_matrix(probe_axis: Callable[[int, int], torch.Tensor], k: int, n: int, nd: int) -> np.ndarray:
    """The [n_in, n_out] matrix of spatial axis k of a separable map (see _separable)."""
    m = probe_axis(k, n)[(slice(None), 0) + tuple(slice(None) if j == k else 0 for j in range(nd))]
    return m.reshape(n, -1).double().numpy()


def _probe_input(k: int, n: int, nd: int) -> torch.Tensor:
    """The identity along spatial axis k (see _separable): [n, 1, 2.., n, ..2]."""
    eye = torch.eye(n, dtype=torch.float64).reshape([n, 1] + [n if j == k else 1 for j in range(nd)])
    return eye.expand([n, 1] + [n if j == k else 2 for j in range(nd)]).contiguous()


_INTERPOLATIONS = {  # packet -> spatial dims, whether it takes align_corners
    "upsample_nearest1d": (1, False), "upsample_nearest2d": (2, False), "upsample_nearest3d": (3, False),
    "_upsample_nearest_exact1d": (1, False), "_upsample_nearest_exact2d": (2, False),
    "_upsample_nearest_exact3d": (3, False), "upsample_linear1d": (1, True), "upsample_bilinear2d": (2, True),
    "upsample_trilinear3d": (3, True), "upsample_bicubic2d": (2, True), "_upsample_bilinear2d_aa": (2, True),
    "_upsample_bicubic2d_aa": (2, True),
}


def _interpolate(c: _Ctx, x, output_size, *rest):
    """Every F.interpolate mode (upsample_*, .vec or not): separable, torch's weights per axis."""
    name = _packet_name(c.node.target)
    nd, corners = _INTERPOLATIONS[name]
    align = bool(rest[0]) if corners and rest else False
    rest = rest[1:] if corners else rest
    out = list(c.node.meta["val"].shape[2:])
    if c.node.target._overloadname == "vec":
        factors = rest[0] if rest else None
        scales = [factors[k] if factors else None for k in range(nd)]
    else:
        scales = list(rest) + [None] * (nd - len(rest))
    op = getattr(torch.ops.aten, name).default
    if any(d < 0 for d in x.shape[2:]) or any(_is_dynamic(o) for o in out):  # sizes known per size: the resize op
        return _resize_dynamic(c, x, name, align, out, scales)

    def probe(k, n):
        eye = _probe_input(k, n, nd)
        o = [out[k] if j == k else 2 for j in range(nd)]
        s = [scales[k] if j == k else None for j in range(nd)]
        return op(eye, o, align, *s) if corners else op(eye, o, *s)
    return _separable(c, x, probe)


def _resize_dynamic(c: _Ctx, x, name: str, align: bool, out: list, scales: list):
    """A 2-D nearest / nearest-exact / bilinear interpolation of an image whose size is dynamic:
    the resize op (NCHW) to torch's traced output size, computed in the graph. torch's source
    coordinate uses the scale factor where one is given, the op in / out: equal for whole-number
    factors, the only ones taken."""
    modes = {"upsample_nearest2d": (tg.ResizeMode.nearest, tg.CoordinateMode.asymmetric, tg.NearestRounding.floor),
             "_upsample_nearest_exact2d": (tg.ResizeMode.nearest, tg.CoordinateMode.half_pixel,
                                           tg.NearestRounding.round_prefer_ceil),
             "upsample_bilinear2d": (tg.ResizeMode.bilinear, tg.CoordinateMode.align_corners if align
                                     else tg.CoordinateMode.half_pixel, tg.NearestRounding.floor)}
    if name not in modes:
        raise tg.Error(f"[torch] {name} of an image of dynamic size {list(x.shape)}: only nearest, nearest-exact "
                       "and bilinear 2-D interpolation keep the size dynamic")
    if any(f is not None and (f < 1 or float(f) != int(f)) for f in scales):
        raise tg.Error(f"[torch] {name} of an image of dynamic size by scale factors {scales}: whole numbers only")
    mode, coords, rounding = modes[name]
    desc = tg.ResizeDesc(mode=mode, coordinates=coords, rounding=rounding, data_layout=tg.Layout.nchw)
    return c.g.resize_sized(c.cast(x, c.out_dtype or x.dtype), c.size_tensor(out), desc)


def _adaptive_avg_probe(nd: int, out: list) -> Callable[[int, int], torch.Tensor]:
    """probe_axis (see _separable) of adaptive average pooling to spatial size `out`."""
    op = {1: torch.ops.aten.adaptive_avg_pool1d, 2: torch.ops.aten._adaptive_avg_pool2d,
          3: torch.ops.aten._adaptive_avg_pool3d}[nd].default
    return lambda k, n: op(_probe_input(k, n, nd), [out[k] if j == k else 2 for j in range(nd)])


def _adaptive_avg_pool(c: _Ctx, x, output_size):
    nd = len(output_size)  # (an unbatched input has one leading dim, not two)
    out = list(c.node.meta["val"].shape[-nd:])
    if any(d < 0 for d in x.shape[-nd:]):  # windows known per size: weights computed in the graph
        return _adaptive_avg_dynamic(c, x, out)
    return _separable(c, x, _adaptive_avg_probe(x.rank - 2, out))


def _adaptive_matrix(c: _Ctx, x, axis: int, o: int, t: tg.DType) -> tg.Tensor:
    """The [n, o] weights of adaptive average pooling to o along `axis` of x, whose size n is
    known only per size: torch's windows [floor(i n / o), ceil((i + 1) n / o)), each averaged,
    computed in the graph from n (so one executable serves every n)."""
    g = c.g
    i64 = lambda v: g.constant(np.asarray(v, np.int64))  # noqa: E731
    n = c.dim_scalar(x, axis)
    j = g.expand_dims(g.arange_sized(i64(0), n, i64(1), tg.i64), [1])     # [n, 1]
    i = np.arange(o, dtype=np.int64)
    start = g.div(g.mul(i64(i), n), i64(o))                                 # [o] (sizes >= 0:
    end = g.div(g.add(g.mul(i64(i + 1), n), i64(o - 1)), i64(o))            #  division floors)
    inside = g.logical_and(g.greater_equal(j, start), g.less(j, end))
    return g.div(g.cast(inside, t), g.cast(g.sub(end, start), t))


def _adaptive_avg_dynamic(c: _Ctx, x, out: list, grad=None):
    """Adaptive average pooling of x to spatial sizes `out` (or, with grad, x's gradient from
    the pooled one's) where x's spatial sizes are dynamic: each axis through its weight matrix
    (_adaptive_matrix) by a matmul over that axis, the matrix broadcast over the other dims; a
    forward pooling to size 1 is a mean."""
    if any(_is_dynamic(o) for o in out):
        raise tg.Error(f"[torch] adaptive average pooling of {list(x.shape)} to sizes {out} computed from the input's")
    g = c.g
    y = grad if grad is not None else x
    t = c.out_dtype or y.dtype
    y = c.cast(y, t)
    for k, o in enumerate(int(s) for s in out):
        a, last = y.rank - len(out) + k, y.rank - 1
        if x.shape[a] == o:
            continue
        if grad is None and o == 1:
            y = g.reduce_mean(y, [a], keep_dims=True)
            continue
        swap = list(range(y.rank))  # axis a and the last trade places (its own inverse)
        swap[a], swap[last] = last, a
        y = y if a == last else g.transpose(y, swap)
        y = g.matmul(y, _adaptive_matrix(c, x, a, o, t), transpose_b=grad is not None)
        y = y if a == last else g.transpose(y, swap)
    return y


def _adaptive_avg_pool_backward(c: _Ctx, grad, x):
    """The gradient of adaptive average pooling: each spatial axis through the transpose of the
    forward's matrix (torch's own windows)."""
    nd = x.rank - 2
    spatial = 3 if _packet_name(c.node.target).startswith("_adaptive_avg_pool3d") else 2
    if any(d < 0 for d in x.shape[-spatial:]):
        return _adaptive_avg_dynamic(c, x, list(grad.shape[-spatial:]), grad)
    probe = _adaptive_avg_probe(nd, list(grad.shape[2:]))
    y = c.cast(grad, c.out_dtype or grad.dtype)
    for k in range(nd):
        y = _along_axis(c, y, 2 + k, np.ascontiguousarray(_axis_matrix(probe, k, x.shape[2 + k], nd).T))
    return y


def _adaptive_max_pool(c: _Ctx, x, output_size):
    """(max, indices) over torch's adaptive windows [floor(i n / o), ceil((i + 1) n / o)), one
    axis at a time (a box's maximum is the maximum of its rows' maxima): each axis gathers its
    windows' taps (short windows repeat their last) and takes their maximum."""
    if 1 in _used_outputs(c):
        raise UnsupportedOp("[torch] adaptive max pooling's indices")
    nd = len(output_size)  # (an unbatched input has one leading dim, not two)
    if any(d < 0 for d in x.shape[-nd:]):  # (its taps per window depend on the size)
        raise tg.Error(f"[torch] adaptive max pooling of {list(x.shape)}: a spatial size that varies")
    g = c.g
    y = x
    for k, o in enumerate(c.node.meta["val"][0].shape[-nd:]):
        a = x.rank - nd + k
        n = x.shape[a]
        starts = [(i * n) // o for i in range(o)]
        ends = [-((-(i + 1) * n) // o) for i in range(o)]
        taps = max(e - b for b, e in zip(starts, ends))
        if taps == 1 and o == n:
            continue
        idx = np.array([[min(b + t, e - 1) for t in range(taps)] for b, e in zip(starts, ends)], np.int64)
        v = g.gather(y, g.constant(idx.reshape(-1)), axis=a)
        shape = list(y.shape[:a]) + [o, taps] + list(y.shape[a + 1:])
        y = g.reduce_max(g.reshape(v, shape), [a + 1], False)
    return (y, None)


def _pool3d_as_2d(c: _Ctx, x, kernel, stride, padding, dilation, pool2d, ceil_mode, count_include_pad=False):
    """A 3-D pooling as two 2-D ones (a box's maximum or average is separable, the divisor too):
    over (H, W) with the depth folded into the channels, then over (D, 1)."""
    g = c.g
    three = lambda v, d: [int(e) for e in (list(v) * 3 if len(v) == 1 else list(v))] if v else d  # noqa: E731
    k = three(kernel, None)
    s = three(stride, k)
    p = three(padding, [0, 0, 0])
    dl = three(dilation, [1, 1, 1])
    n, ch, d, h, w = (c.dim(x, i) for i in range(5))  # (sizes that vary computed in the graph)
    hw = pool2d(c.reshape_to(x, [n, c.size_product(ch, d), h, w]),
                _pool_desc(k[1:], s[1:], p[1:], dl[1:], ceil_mode, count_include_pad))
    ho, wo = c.dim(hw, 2), c.dim(hw, 3)
    y = pool2d(c.reshape_to(hw, [n, ch, d, c.size_product(ho, wo)]),
               _pool_desc([k[0], 1], [s[0], 1], [p[0], 0], [dl[0], 1], ceil_mode, count_include_pad))
    return c.reshape_to(y, [n, ch, c.dim(y, 2), ho, wo])


def _max_pool3d_with_indices(c: _Ctx, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    if 1 in _used_outputs(c):
        raise UnsupportedOp("[torch] max_pool3d's indices")
    return (_pool3d_as_2d(c, x, kernel, stride, padding, dilation, c.g.max_pool2d, ceil_mode), None)


def _avg_pool3d(c: _Ctx, x, kernel, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if divisor_override is not None:
        raise UnsupportedOp("[torch] avg_pool3d with divisor_override")
    return _pool3d_as_2d(c, x, kernel, stride, padding, (1,), c.g.avg_pool2d, ceil_mode, count_include_pad)


_SCATTER_MODES = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max", "amin": "min"}


def _scatter(c: _Ctx, x, dim, index, src, reduce=None, include_self=True):
    """scatter / scatter_add / scatter_reduce: src (or a number) written along dim at index,
    combined as `reduce` says; torch reads only the part of src that index covers."""
    g = c.g
    if reduce is not None and (reduce not in _SCATTER_MODES or not include_self):
        raise UnsupportedOp(f"[torch] scatter with reduce={reduce!r}, include_self={include_self}")
    idx_shape = list(index.shape)
    varies = min(idx_shape, default=0) < 0
    if isinstance(src, tg.Tensor):
        src = c.cast(src, x.dtype)
        if list(src.shape) != idx_shape:
            if varies:  # (a slice to the index's sizes would take -1 for "to the end")
                raise tg.Error(f"[torch] scatter of src {list(src.shape)} by an index {idx_shape} whose sizes vary")
            src = g.slice(src, [0] * src.rank, idx_shape)
    elif varies:  # a number spread over the index's sizes at run time (nll_loss's backward)
        src = g.broadcast_like(c.tensor(src, x), index)
    else:
        src = g.broadcast_to(c.tensor(src, x), idx_shape) if idx_shape else c.tensor(src, x)
    mode = _SCATTER_MODES[reduce] if reduce is not None else "set"
    return g.scatter_along_axis(x, index, src, dim % max(x.rank, 1), mode=mode)


def _index_copy(c: _Ctx, x, dim, index, src):
    return _index_put(c, x, [None] * (dim % x.rank) + [index], src)


def _index_add(c: _Ctx, x, dim, index, src, alpha=1):
    if alpha != 1:
        src = c.g.mul(src, c.scalar(alpha, src))
    return _index_put(c, x, [None] * (dim % x.rank) + [index], src, accumulate=True)


def _vector_norm(c: _Ctx, x, ord=2, dim=None, keepdim=False, dtype=None):
    """torch.linalg.vector_norm over `dim` (None or []: every dim): max |x| (inf), min |x|
    (-inf), the count of non-zeros (0), else (sum |x|^ord)^(1/ord)."""
    g = c.g
    x = c.cast(x, tg_dtype(dtype) if dtype is not None else None)
    axes = _axes(dim if dim else None, x.rank)
    a = g.abs(x)
    ord = float(ord)
    if ord == math.inf:
        return g.reduce_max(a, axes, keepdim)
    if ord == -math.inf:
        return g.reduce_min(a, axes, keepdim)
    if ord == 0:
        return g.reduce_sum(c.cast(g.not_equal(x, c.scalar(0.0, x)), x.dtype), axes, keepdim)
    if ord == 1:
        return g.reduce_sum(a, axes, keepdim)
    if ord == 2:
        return g.sqrt(g.reduce_sum(g.mul(x, x), axes, keepdim))
    return g.pow(g.reduce_sum(g.pow(a, c.scalar(ord, a)), axes, keepdim), c.scalar(1.0 / ord, a))


def _grid_sampler_2d(c: _Ctx, x, grid, mode, padding_mode, align_corners):
    """F.grid_sample on [N, C, H, W] with a grid [N, Ho, Wo, 2] (x, y in [-1, 1]): bilinear (0)
    or nearest (1) sampling, zeros (0) or border (1) padding, as gathers over the flattened image
    with the taps' weights; reflection padding and bicubic are left to torch."""
    g = c.g
    if mode not in (0, 1) or padding_mode not in (0, 1):
        raise UnsupportedOp(f"[torch] grid_sampler_2d with mode {mode}, padding_mode {padding_mode}")
    n, ch, h, w = x.shape
    _, ho, wo, _ = grid.shape
    if min(h, w, ho, wo) < 0:  # (the image's size is a number in the sampling's arithmetic below)
        raise tg.Error(f"[torch] grid_sampler_2d of an image {list(x.shape)} by a grid {list(grid.shape)} "
                       "whose sizes vary: only the batch may")
    gx, gy = [g.reshape(t, [n, 1, ho * wo]) for t in g.split(c.cast(grid, x.dtype), [1, 1], 3)]

    def source(v, size):
        one, s = c.scalar(1.0, v), float(size)
        if align_corners:
            p = g.mul(g.add(v, one), c.scalar((s - 1) / 2, v))
        else:
            p = g.mul(g.sub(g.mul(g.add(v, one), c.scalar(s, v)), one), c.scalar(0.5, v))
        return g.clamp(p, c.scalar(0.0, v), c.scalar(s - 1, v)) if padding_mode == 1 else p

    px, py = source(gx, w), source(gy, h)
    flat = g.reshape(x, [n, ch, h * w])

    def tap(ix, iy, weight):
        """weight * x[iy, ix] where (ix, iy) is inside the image, 0 elsewhere (zeros padding)."""
        inside = g.logical_and(g.logical_and(g.greater_equal(ix, c.scalar(0.0, ix)),
                                             g.less_equal(ix, c.scalar(w - 1.0, ix))),
                               g.logical_and(g.greater_equal(iy, c.scalar(0.0, iy)),
                                             g.less_equal(iy, c.scalar(h - 1.0, iy))))
        cx = g.clamp(ix, c.scalar(0.0, ix), c.scalar(w - 1.0, ix))
        cy = g.clamp(iy, c.scalar(0.0, iy), c.scalar(h - 1.0, iy))
        i = g.cast(g.add(g.mul(cy, c.scalar(float(w), cy)), cx), tg.i64)
        v = g.gather_along_axis(flat, g.broadcast_to(i, [n, ch, ho * wo]), 2)
        wgt = g.select(inside, weight, c.scalar(0.0, weight)) if weight is not None else \
            g.cast(inside, x.dtype)
        return g.mul(v, wgt)

    if mode == 1:  # nearest: round half to even, as torch's nearbyint
        y = tap(g.rint(px), g.rint(py), None)
    else:
        x0, y0 = g.floor(px), g.floor(py)
        one = c.scalar(1.0, px)
        x1, y1 = g.add(x0, one), g.add(y0, one)
        wx1, wy1 = g.sub(px, x0), g.sub(py, y0)
        wx0, wy0 = g.sub(one, wx1), g.sub(one, wy1)
        y = g.add(g.add(tap(x0, y0, g.mul(wx0, wy0)), tap(x1, y0, g.mul(wx1, wy0))),
                  g.add(tap(x0, y1, g.mul(wx0, wy1)), tap(x1, y1, g.mul(wx1, wy1))))
    return g.reshape(y, [n, ch, ho, wo])


def _roi_align(c: _Ctx, x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    """torchvision.ops.roi_align (Faster / Mask R-CNN's MultiScaleRoIAlign): x [N, C, H, W], rois
    [K, 5] rows (image, x1, y1, x2, y2) -> [K, C, ph, pw], each bin the mean of sr x sr bilinear
    samples. The samples' coordinates are separable (rows [K, ph*sr], columns [K, pw*sr]), so the
    four taps of every sample are four gathers from the image as [N*H*W, C] rows, weighted by
    products of per-row and per-column weights. A sample outside [-1, H] x [-1, W] counts 0 and a
    tap past the last row or column clamps to it, as torchvision's kernel. The adaptive sampling
    ratio (<= 0: taps per bin from each box's size) depends on the data and is left to torch."""
    g = c.g
    if int(sampling_ratio) <= 0:
        raise UnsupportedOp("[torch] roi_align with an adaptive sampling ratio (taps per bin from each box's size)")
    n, ch, h, w = x.shape
    if h < 0 or w < 0:  # (the image's size is a number in the sampling's arithmetic below)
        raise tg.Error(f"[torch] roi_align over a feature map {list(x.shape)} whose size varies: only the batch "
                       "and the box count may")
    k = rois.shape[0]
    ph, pw, sr = int(pooled_height), int(pooled_width), int(sampling_ratio)
    f32 = tg.f32
    r = c.cast(rois, f32)
    b, x1, y1, x2, y2 = g.split(r, [1, 1, 1, 1, 1], 1)  # each [K, 1]
    off = c.scalar(0.5 if aligned else 0.0, r)
    scale = c.scalar(float(spatial_scale), r)
    start_w, start_h = g.sub(g.mul(x1, scale), off), g.sub(g.mul(y1, scale), off)
    roi_w = g.sub(g.sub(g.mul(x2, scale), off), start_w)
    roi_h = g.sub(g.sub(g.mul(y2, scale), off), start_h)
    if not aligned:  # boxes at least one pixel wide and tall
        roi_w, roi_h = g.maximum(roi_w, c.scalar(1.0, r)), g.maximum(roi_h, c.scalar(1.0, r))
    bin_w, bin_h = g.div(roi_w, c.scalar(float(pw), r)), g.div(roi_h, c.scalar(float(ph), r))

    def coords(start, size_bin, bins):
        """[K, bins*sr]: start + bin * (p + (i + 0.5) / sr) for bin p, sample i."""
        at = np.array([p + (i + 0.5) / sr for p in range(bins) for i in range(sr)], np.float32)
        return g.add(start, g.mul(size_bin, g.constant(at.reshape(1, -1))))

    def axis(v, size):
        """Per sample along one axis: inside [-1, size], the low / high tap and their weights."""
        inside = g.logical_and(g.greater_equal(v, c.scalar(-1.0, v)), g.less_equal(v, c.scalar(float(size), v)))
        v = g.maximum(v, c.scalar(0.0, v))
        low = g.floor(v)
        last = c.scalar(float(size - 1), v)
        edge = g.greater_equal(low, last)
        low = g.select(edge, last, low)
        high = g.select(edge, last, g.add(low, c.scalar(1.0, v)))
        frac = g.sub(g.select(edge, low, v), low)
        return inside, g.cast(low, tg.i64), g.cast(high, tg.i64), g.sub(c.scalar(1.0, frac), frac), frac

    hs, ws = ph * sr, pw * sr
    in_y, y_lo, y_hi, wy_lo, wy_hi = axis(coords(start_h, bin_h, ph), h)  # [K, hs]
    in_x, x_lo, x_hi, wx_lo, wx_hi = axis(coords(start_w, bin_w, pw), w)  # [K, ws]
    rows = c.reshape_to(g.transpose(x, [0, 2, 3, 1]), [c.size_product(c.dim(x, 0), h, w), ch])
    base = g.mul(g.cast(b, tg.i64), c.tensor(h, dtype=tg.i64))  # [K, 1]: the image's first row

    def col(t):  # [K, s] -> [K, s, 1]
        return g.reshape(t, [k, t.shape[1], 1])

    def row(t):  # [K, s] -> [K, 1, s]
        return g.reshape(t, [k, 1, t.shape[1]])

    acc = None
    for yi, wy in ((y_lo, wy_lo), (y_hi, wy_hi)):
        line = g.mul(col(g.add(base, yi)), c.tensor(w, dtype=tg.i64))  # [K, hs, 1]
        for xi, wx in ((x_lo, wx_lo), (x_hi, wx_hi)):
            v = c.cast(g.gather(rows, g.add(line, row(xi)), 0), f32)  # [K, hs, ws, C]
            term = g.mul(v, g.reshape(g.mul(col(wy), row(wx)), [k, hs, ws, 1]))
            acc = term if acc is None else g.add(acc, term)
    inside = g.reshape(g.cast(g.logical_and(col(in_y), row(in_x)), f32), [k, hs, ws, 1])
    acc = g.mul(acc, inside)
    pooled = g.reduce_mean(g.reshape(acc, [k, ph, sr, pw, sr, ch]), [2, 4])  # [K, ph, pw, C]
    return c.cast(g.transpose(pooled, [0, 3, 1, 2]), x.dtype)


def _roi_align_backward(c: _Ctx, grad, rois, spatial_scale, pooled_height, pooled_width, batch_size, channels,
                        height, width, sampling_ratio, aligned):
    """torchvision's roi_align gradient with respect to the image (Faster / Mask R-CNN training):
    roi_align is linear in the image, so its gradient at cotangent `grad` is tgraph's own
    gradient of the graph _roi_align builds (its gathers turn into scatter-adds), taken at an
    image of zeros of the given size, whose values it does not depend on."""
    g = c.g
    x = g.broadcast_to(c.scalar(0.0, grad), [int(batch_size), int(channels), int(height), int(width)])
    y = _roi_align(c, x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)
    (dx,) = g.gradients(g.reduce_sum(g.mul(y, c.cast(grad, y.dtype))), [x])
    return c.cast(dx, grad.dtype)


def _max_min(op: str):
    """max / min: of all elements (x), (values, indices) along dim, or elementwise (x, other)."""
    def conv(c: _Ctx, x, dim=None, keepdim=False):
        g = c.g
        if isinstance(dim, tg.Tensor):
            return _binary("maximum_nan" if op == "max" else "minimum_nan")(c, x, dim)
        if dim is None:
            return getattr(g, "reduce_" + op)(x, list(range(x.rank)), False)
        d = dim % x.rank
        v = getattr(g, "reduce_" + op)(x, [d], keepdim)
        i = c.cast(getattr(g, "arg" + op)(x, d, keepdim), tg.i64) if 1 in _used_outputs(c) else None
        return (v, i)
    return conv


def _no_op(c: _Ctx, *args, **kwargs):
    return None


_CONVERTERS: dict[str, Callable] = {
    # checks torch.export leaves in the graph (of metadata it already knows): nothing to run
    "_assert_tensor_metadata": _no_op, "_assert_scalar": _no_op, "_assert_async": _no_op,
    # elementwise
    "add": _binary("add"), "sub": _binary("sub"), "rsub": lambda c, a, b, alpha=1: _binary("sub")(c, b, a, alpha),
    "mul": _binary("mul"), "div": _binary("div"), "true_divide": _binary("div"), "remainder": _binary("floor_mod"), "fmod": _binary("mod"),
    "maximum": _binary("maximum_nan"), "minimum": _binary("minimum_nan"), "atan2": _binary("atan2"),
    "eq": _binary("equal", True), "ne": _binary("not_equal", True), "lt": _binary("less", True),
    "le": _binary("less_equal", True), "gt": _binary("greater", True), "ge": _binary("greater_equal", True),
    "logical_and": lambda c, a, b: c.g.logical_and(c.cast(a, tg.bool_), c.cast(b, tg.bool_)),
    "logical_or": lambda c, a, b: c.g.logical_or(c.cast(a, tg.bool_), c.cast(b, tg.bool_)),
    "logical_xor": lambda c, a, b: c.g.logical_xor(c.cast(a, tg.bool_), c.cast(b, tg.bool_)),
    "logical_not": lambda c, x: c.g.logical_not(c.cast(x, tg.bool_)),
    "bitwise_and": _binary("bitwise_and"), "bitwise_or": _binary("bitwise_or"), "bitwise_xor": _binary("bitwise_xor"),
    "bitwise_not": lambda c, x: c.g.logical_not(x) if x.dtype == tg.bool_ else c.g.bitwise_not(x),
    "pow": _pow, "where": _where, "clamp": _clamp, "clamp_min": lambda c, x, lo: _clamp(c, x, lo, None),
    "clamp_max": lambda c, x, hi: _clamp(c, x, None, hi), "hardtanh": _hardtanh,
    "neg": _unary("neg"), "abs": _unary("abs"), "sign": _unary("sign"), "exp": _unary("exp"), "exp2": _unary("exp2"),
    "log": _unary("log"), "log2": _unary("log2"), "log1p": _unary("log1p"), "expm1": _unary("expm1"),
    "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"), "reciprocal": _unary("reciprocal"), "sin": _unary("sin"),
    "cos": _unary("cos"), "tan": _unary("tan"), "sinh": _unary("sinh"), "cosh": _unary("cosh"),
    "tanh": _unary("tanh"), "asin": _unary("asin"), "acos": _unary("acos"), "atan": _unary("atan"),
    "asinh": _unary("asinh"), "acosh": _unary("acosh"), "atanh": _unary("atanh"), "erf": _unary("erf"),
    "floor": _unary("floor"), "ceil": _unary("ceil"), "round": _unary("rint"), "trunc": _unary("trunc"),
    "sigmoid": _unary("sigmoid"), "relu": _unary("relu"), "silu": _unary("silu"), "softplus": _unary("softplus"),
    "isnan": _unary("is_nan"), "isinf": _unary("is_inf"), "isfinite": _unary("is_finite"),
    "gelu": _gelu, "leaky_relu": _leaky_relu, "elu": _elu,
    "hardsigmoid": lambda c, x: c.g.hard_sigmoid(x, 1 / 6, 0.5),
    "hardswish": lambda c, x: c.g.mul(x, c.g.hard_sigmoid(x, 1 / 6, 0.5)),
    "_to_copy": _to_copy,
    # prims' cast (AOTAutograd's decompositions of a decoder's attention mask leave it)
    "convert_element_type": lambda c, x, dtype=None: c.cast(x, c.out_dtype or tg_dtype(dtype)),
    "clone": lambda c, x, **kw: c.g.identity(x) if x.dtype != tg.bool_ else x,
    "alias": lambda c, x: x, "contiguous": lambda c, x, memory_format=None: x, "detach": lambda c, x: x, "lift_fresh_copy": lambda c, x: x,
    "copy": lambda c, dst, src, non_blocking=False: _broadcast_like(c, c.cast(c.tensor(src, dst), dst.dtype), dst),
    # reductions
    "sum": _reduce("reduce_sum"), "mean": _reduce("reduce_mean"), "prod": lambda c, x, dim=None, keepdim=False,
    dtype=None: _reduce("reduce_prod")(c, x, dim, keepdim), "amax": _reduce("reduce_max"), "amin": _reduce("reduce_min"),
    "any": lambda c, x, dim=None, keepdim=False: c.g.reduce_any(c.cast(x, tg.bool_), _axes(dim, x.rank), keepdim),
    "all": lambda c, x, dim=None, keepdim=False: c.g.reduce_all(c.cast(x, tg.bool_), _axes(dim, x.rank), keepdim),
    "logsumexp": lambda c, x, dim, keepdim=False: c.g.reduce_logsumexp(x, _axes(dim, x.rank), keepdim),
    "max": _max_min("max"), "min": _max_min("min"), "var": _var, "argmax": _argminmax("argmax"), "argmin": _argminmax("argmin"), "topk": _topk, "sort": _sort,
    "cumsum": _cumsum, "_softmax": _softmax("softmax"), "_log_softmax": _softmax("log_softmax"),
    "softmax": _softmax("softmax"), "log_softmax": _softmax("log_softmax"),
    # linear algebra, convolution, pooling, normalisation
    "addmm": _addmm, "_scaled_mm": _scaled_mm, "mm": lambda c, a, b: c.g.matmul(a, b), "bmm": lambda c, a, b: c.g.matmul(a, b),
    "matmul": lambda c, a, b: c.g.matmul(a, b), "convolution": _convolution,
    "_native_batch_norm_legit_no_training": _batch_norm_no_training, "native_layer_norm": _layer_norm,
    "layer_norm": lambda c, x, shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True:
    _layer_norm(c, x, shape, weight, bias, eps)[0], "linear": _linear,
    "native_group_norm": _group_norm,
    "_native_batch_norm_legit_functional": _batch_norm_functional, "convolution_backward": _convolution_backward,
    "max_pool2d_with_indices_backward": _max_pool2d_backward, "avg_pool2d_backward": _avg_pool2d_backward,
    "max_pool2d_backward_from_input": _max_pool2d_backward,
    "native_dropout": _native_dropout, "bernoulli": _bernoulli, "empty": _empty, "empty_permuted": _empty,
    "rand": _rand, "rand_like": lambda c, x, **kw: _rand(c, x.shape), "randn": _randn, "uniform": _uniform,
    "_weight_norm_interface_backward": _weight_norm_backward,
    "randn_like": lambda c, x, **kw: _randn(c, x.shape),
    "_native_batch_norm_legit": lambda c, x, w, b, *rest: _batch_norm_no_stats(c, x, w, b, *rest),
    "new_empty_strided": lambda c, x, size, stride, **kw: _empty(c, size), "index_put": _index_put,
    "max_pool2d_with_indices": _max_pool2d_with_indices, "avg_pool2d": _avg_pool2d,
    "scaled_dot_product_attention": _sdpa, "embedding": _embedding,
    **{name: _interpolate for name in _INTERPOLATIONS}, "_adaptive_avg_pool2d": _adaptive_avg_pool,
    "_adaptive_avg_pool2d_backward": _adaptive_avg_pool_backward,
    "_adaptive_avg_pool3d_backward": _adaptive_avg_pool_backward,
    "_adaptive_avg_pool3d": _adaptive_avg_pool, "adaptive_avg_pool1d": _adaptive_avg_pool,
    "adaptive_max_pool2d": _adaptive_max_pool, "adaptive_max_pool3d": _adaptive_max_pool,
    "adaptive_max_pool1d": _adaptive_max_pool, "max_pool3d_with_indices": _max_pool3d_with_indices,
    "avg_pool3d": _avg_pool3d, "scatter": _scatter, "scatter_add": lambda c, x, dim, index, src: _scatter(
        c, x, dim, index, src, "add"), "scatter_reduce": _scatter, "index_copy": _index_copy,
    "index_add": _index_add, "grid_sampler_2d": _grid_sampler_2d, "roi_align": _roi_align,
    # what torch picks for grid_sample on CUDA when cuDNN can (bilinear, zeros, align_corners)
    "cudnn_grid_sampler": lambda c, x, grid: _grid_sampler_2d(c, x, grid, 0, 0, True),
    "linalg_vector_norm": _vector_norm,
    "_roi_align_backward": _roi_align_backward,
    # shape and indexing
    "view": _view, "_unsafe_view": _view, "reshape": _view, "permute": lambda c, x, dims: c.g.transpose(
        x, [d % x.rank for d in dims]) if x.rank else x,
    "t": lambda c, x: c.g.transpose(x, [1, 0]) if x.rank == 2 else x,
    "transpose": lambda c, x, a, b: c.g.transpose(x, [b % x.rank if i == a % x.rank else a % x.rank if
                                                     i == b % x.rank else i for i in range(x.rank)]),
    "expand": _expand, "unsqueeze": lambda c, x, dim: c.g.expand_dims(x, [dim % (x.rank + 1)]),
    "squeeze": _squeeze, "select": _select, "slice": _slice, "cat": _cat, "slice_scatter": _slice_scatter,
    "index": _index, "as_strided": _as_strided, "as_strided_scatter": _as_strided_scatter,
    "stack": lambda c, xs, dim=0: c.g.stack(list(xs), dim % (xs[0].rank + 1)),
    "split_with_sizes": _split_with_sizes, "split": _split, "constant_pad_nd": _constant_pad_nd,
    "index_select": _index_select, "gather": _gather, "flip": lambda c, x, dims: c.g.reverse(x, _axes(dims, x.rank)),
    "repeat": _repeat,
    "full": _full, "full_like": _full_like, "zeros_like": lambda c, x, **kw: _full_like(c, x, 0),
    "ones_like": lambda c, x, **kw: _full_like(c, x, 1), "zeros": lambda c, shape, **kw: _full(c, shape, 0),
    "ones": lambda c, shape, **kw: _full(c, shape, 1), "scalar_tensor": _scalar_tensor, "arange": _arange,
}


def _at(e: Exception, node: torch.fx.Node) -> Exception:
    """e, marked with the node it was raised at (the partitioner leaves that node to PyTorch)."""
    if getattr(e, "tg_node", None) is None:
        e.tg_node = node.name
    return e


def convertible(node: torch.fx.Node) -> bool:
    """Whether convert() has a converter for this node (it may still refuse its arguments)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return True
    name = _packet_name(node.target)
    if _is_size_node(node):
        return True  # size arithmetic (_size_value)
    return name in _CONVERTERS or name == "dropout"


def _packet_name(target) -> str:
    """aten.add.Tensor -> 'add' (overloads share a converter)."""
    name = getattr(target, "_overloadpacket", None)
    name = getattr(name, "__name__", None) or str(target).split(".")[-2 if "." in str(target) else -1]
    return name.split("::")[-1]


class Converted(NamedTuple):
    """What convert() builds: the graph, its feeds (the inputs in order, then the random
    stream's state when `random`), the outputs and the output node's structure."""
    graph: tg.Graph
    feeds: list
    outputs: list
    structure: Any
    random: bool


def convert(graph: torch.fx.Graph, inputs: list, constants: dict[str, torch.Tensor],
            input_types: list[tg.TensorType], py_values: dict | None = None,
            input_perms: dict | None = None, size_feeds=frozenset()) -> "Converted":
    """Builds a tgraph graph from an FX graph of ATen ops. `inputs`: the placeholder names fed at
    run time (in order, with input_types); `constants`: placeholder or attribute name -> tensor
    baked in; `py_values`: placeholders that are Python values (sizes); `input_perms`: inputs fed
    as a permutation of their value (name -> perm: the feed is transpose(value, perm), e.g. the
    NHWC storage of a channels-last tensor); `size_feeds`: size placeholders fed as the length of
    a byte vector (their symbol is its dim 0). Returns (graph, feeds, outputs, output structure)."""
    py_values = py_values or {}
    input_perms = input_perms or {}
    g = tg.Graph()
    c = _Ctx(g)
    env: dict[str, Any] = {}
    feeds = []
    types = dict(zip(inputs, input_types))

    def value(a):
        if isinstance(a, torch.fx.Node):
            return env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(value(x) for x in a)
        if isinstance(a, torch.dtype) or isinstance(a, torch.device) or isinstance(a, torch.layout) or \
                isinstance(a, torch.memory_format):
            return a
        return a

    out_struct = None
    sym_feeds = {}  # symbol -> (feed index, dim) whose size it is
    for node in graph.nodes:
        c.node = node
        if node.op == "placeholder":
            if node.name in size_feeds:  # a size, as the length of a byte vector
                fed = g.placeholder([-1], tg.u8, node.name)
                feeds.append(fed)
                e = _sym_expr(node.meta["val"])
                c.sym_sources[e] = (fed, 0)
                sym_feeds[e] = (len(feeds) - 1, 0)
                env[node.name] = Sym(e)
            elif node.name in types:
                t = types[node.name]
                perm = input_perms.get(node.name)
                if perm:
                    fed = g.placeholder([t.shape[a] for a in perm], t.dtype, node.name)
                    env[node.name] = g.transpose(fed, [perm.index(i) for i in range(len(perm))])
                else:
                    fed = env[node.name] = g.placeholder(list(t.shape), t.dtype, node.name)
                feeds.append(fed)
                v = node.meta.get("val")
                if isinstance(v, torch.Tensor):  # its symbolic dims name the sizes they are
                    for d, size in enumerate(v.shape):
                        e = _sym_expr(size)
                        if _is_dynamic(size) and getattr(e, "is_Symbol", False) and e not in c.sym_sources:
                            c.sym_sources[e] = (env[node.name], d)
                            sym_feeds[e] = (len(feeds) - 1, d)
            elif node.name in constants:
                env[node.name] = _constant(g, constants[node.name], node.name)
            elif node.name in py_values:
                v = py_values[node.name]
                env[node.name] = Sym(_sym_expr(v)) if _is_dynamic(v) else v
            else:
                raise tg.Error(f"[torch] input {node.name} is neither fed nor a known constant")
        elif node.op == "get_attr":
            env[node.name] = _constant(g, constants[node.target], node.name)
        elif node.op == "call_function":
            if node.target is operator.getitem:
                seq, i = value(node.args[0]), node.args[1]
                env[node.name] = seq[i]
                continue
            name = _packet_name(node.target)
            if _is_size_node(node):
                env[node.name] = _size_value(name, node, value(node.args), node.meta.get("val"))
                continue
            if name == "dropout" and not node.kwargs.get("train", node.args[2] if len(node.args) > 2 else False):
                env[node.name] = value(node.args[0])  # eval-mode dropout: the identity
                continue
            fn = _CONVERTERS.get(name)
            if fn is None:
                raise _at(UnsupportedOp(f"[torch] no converter for {node.target} (node {node.name}); "
                                        f"{len(_CONVERTERS)} ATen ops are supported: see tgraph.torch._CONVERTERS"),
                          node)
            args = value(node.args)
            kwargs = {k: value(v) for k, v in node.kwargs.items() if k not in ("device", "layout", "pin_memory",
                                                                                 "memory_format", "non_blocking")}
            if "dtype" in kwargs and name not in ("_to_copy", "sum", "mean", "cumsum", "full", "full_like",
                                                  "zeros_like", "ones_like", "zeros", "ones", "scalar_tensor",
                                                  "arange", "prod", "empty", "empty_permuted", "new_empty_strided", "rand",
                                                  "rand_like", "randn", "randn_like"):
                kwargs.pop("dtype")
            try:
                r = fn(c, *args, **kwargs)
            except tg.Error as e:
                raise _at(e, node)
            except Exception as e:  # a converter's own mistake or an unhandled argument form
                raise _at(tg.Error(f"[torch] converting {node.target} (node {node.name}): {type(e).__name__}: {e}"),
                          node) from e
            v = node.meta.get("val")
            if isinstance(r, tg.Tensor) and isinstance(v, torch.Tensor):
                if not _same_shape(r.shape, v.shape) and _pinnable(r.shape, v.shape):
                    r = _pin(c, r, v.shape)
                if not _same_shape(r.shape, v.shape):
                    raise _at(tg.Error(f"[torch] {node.target} (node {node.name}) made shape {r.shape}, torch says "
                                       f"{tuple(v.shape)}"), node)
                r = c.cast(r, tg_dtype(v.dtype))
                for d, size in enumerate(v.shape):  # its derived sizes, for later views to name
                    if r.shape[d] < 0 and _is_dynamic(size) and not getattr(_sym_expr(size), "is_Symbol", False):
                        c.derived[_sym_expr(size)] = (r, d)
            env[node.name] = r
        elif node.op == "output":
            out_struct = node.args[0]
        else:
            raise UnsupportedOp(f"[torch] FX node kind {node.op} ({node.target})")
    flat = list(out_struct) if isinstance(out_struct, (list, tuple)) else [out_struct]
    fed = {name: k for k, name in enumerate(inputs)}
    outs = [InputOut(fed[o.name]) if isinstance(o, torch.fx.Node) and o.op == "placeholder" and o.name in fed
            and o.name not in size_feeds else value(o) if isinstance(o, torch.fx.Node) else o for o in flat]
    for i, o in enumerate(outs):
        if isinstance(o, Sym):
            free = {s: sym_feeds[s] for s in o.expr.free_symbols if s in sym_feeds}
            if len(free) != len(o.expr.free_symbols):
                raise tg.Error(f"[torch] the size output {o.expr} is not a function of the fed tensors' dims")
            outs[i] = SizeOut(o.expr, free)
    if c.rng_feed is not None:
        feeds.append(c.rng_feed)  # the last feed: _Compiled gives it a fresh state every run
    return Converted(g, feeds, outs, out_struct, c.rng_feed is not None)


def _is_size_node(node: torch.fx.Node) -> bool:
    """A node that computes a size (sym_size, operator.mul of sizes, ...), not a tensor."""
    if _packet_name(node.target) in ("sym_size", "sym_numel"):
        return True
    v = node.meta.get("val")
    return isinstance(v, (torch.SymInt, torch.SymFloat, int, float)) and not isinstance(v, bool) and not any(
        isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor) for a in node.args)


def _size_value(name: str, node: torch.fx.Node, args, traced):
    """A size computed in the graph (sym_size, size arithmetic such as operator.mul): a number
    where tgraph's shapes fix it, else a Sym of torch's expression."""
    if name in ("sym_size", "sym_numel"):
        x = args[0]
        dims = [x.shape[args[1] % x.rank]] if name == "sym_size" else list(x.shape)
        if min(dims, default=0) >= 0:
            return int(np.prod(dims, dtype=np.int64))
    elif not any(isinstance(a, Sym) for a in _flat(args)):
        return node.target(*args)  # operator.mul / floordiv / ... of numbers
    if _is_dynamic(traced):
        return Sym(_sym_expr(traced))
    return float(_sym_expr(traced)) if isinstance(traced, (float, torch.SymFloat)) else int(_sym_expr(traced))


def _flat(args):
    """args with lists and tuples opened (torch.sym_sum takes its sizes as a list)."""
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


def _pinnable(ours, theirs) -> bool:
    """Whether torch fixed sizes that tgraph keeps dynamic, and nothing else differs: x[:, -3:]
    of a dynamic dim is 3 long (torch's guards hold the size where that is so), a pooling of a
    32-pixel image to 1 x 1 stays 1 over the range torch allows."""
    return len(ours) == len(theirs) and all(
        _is_dynamic(b) or a == int(_sym_expr(b)) or a < 0 for a, b in zip(ours, theirs))


def _pin(c: _Ctx, r: tg.Tensor, shape) -> tg.Tensor:
    """r reshaped to torch's shape: its fixed sizes as numbers, the rest named as views name
    them (one left to infer); r unchanged where that cannot be done (the shape check then says
    what differs)."""
    known = {_sym_expr(d): (r, i) for i, d in enumerate(shape) if r.shape[i] < 0 and _is_dynamic(d)}
    codes, sources = c.dims(list(shape), known=known)
    if codes.count(None) > 1:
        return r
    return c.g.reshape(r, [-1 if d is None else d for d in codes], sources)


def _same_shape(ours, theirs) -> bool:
    """tgraph's shape against torch's: equal where torch's size is a number; a symbolic size
    of torch's is dynamic (-1) in ours, or this graph's own size where it was specialised."""
    if len(ours) != len(theirs):
        return False
    return all(_is_dynamic(b) or a == int(_sym_expr(b)) for a, b in zip(ours, theirs))


def _constant(g: tg.Graph, t: torch.Tensor, name: str) -> tg.Tensor:
    t = t.detach()
    dt = tg_dtype(t.dtype)
    arr = _numpy(t)
    return g.constant(arr, name, dtype=dt)


# The fused attention kernels torch picks on CUDA, and their backwards (_aten_attention.py).
from ._aten_attention import CONVERTERS as _ATTENTION_CONVERTERS  # noqa: E402

_CONVERTERS.update(_ATTENTION_CONVERTERS)
