"""tgraph: build a graph of tensor operations, compile it once, run it many times.

    import numpy as np, tgraph as tg
    g = tg.Graph()
    x = g.placeholder([-1, 3], tg.f32, "x")          # -1: a dynamic dim
    w = g.variable(np.ones((3, 2), np.float32), "w")
    y = g.relu(x @ w + 1.0)
    exe = g.compile([x], [y], device="cpu")          # or "cuda", tg.Device.best()
    out, = exe.run([np.random.rand(5, 3).astype(np.float32)])

Host tensors are numpy arrays (bf16 results come back as float32: numpy has no bfloat16);
`DeviceTensor` and `from_dlpack` exchange device memory with PyTorch, JAX or CuPy without a
copy. Errors are `tgraph.Error` and name the op and the shapes.
"""
from __future__ import annotations

import builtins as _builtins  # tg.slice, tg.abs, tg.round and tg.pow shadow the builtins here
import numbers
import threading as _threading
from typing import Iterable, Sequence

import numpy as _np


def _load_cxx_runtime():
    """Makes the C++ runtime global before the extension loads. The extension is loaded with
    RTLD_LOCAL; where libtgraph.so carries copies of libstdc++ symbols (the GPU machine's CUDA
    toolchain links some in), its calls bound to those copies, whose locale state libstdc++
    never initialised, and the first ostream write of the CUDA code generator crashed
    (docs/python.md). With libstdc++ global, every reference binds to the one runtime."""
    import ctypes
    import os
    try:
        ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_GLOBAL)
    except OSError:
        pass


_load_cxx_runtime()
from . import _tgraph  # noqa: E402
from ._tgraph import (  # noqa: E402,F401  (re-exported)
    AttentionDesc, Boundary, CompileOptions, ConvDesc, CoordinateMode, Device, DeviceTensor,
    Distribution, DType, Error, Executable, Graph, Layout, LossReduction, NearestRounding,
    Operation, PaddingStyle, PadMode, PoolDesc, Precision, RandomDesc, Reduction, ResizeDesc,
    ResizeMode, ScatterMode, SliceDesc, StencilDesc, Tensor, TensorType, dim_from_source, dtype, dtype_size,
    from_dlpack, onnx, optim, promote_types, to_device,
)

__version__ = "0.1.0"
_dtype_of = dtype  # for functions whose `dtype` argument hides it

f32, f16, bf16, f64 = DType.f32, DType.f16, DType.bf16, DType.f64
i8, i16, i32, i64, u8 = DType.i8, DType.i16, DType.i32, DType.i64, DType.u8
bool_ = DType.bool
f8e4m3, f8e5m2 = DType.f8e4m3, DType.f8e5m2  # 8-bit floats: storage, casts and scaled_matmul

_NUMPY_OF = {DType.f32: _np.float32, DType.f16: _np.float16, DType.f64: _np.float64,
             DType.bf16: _np.float32, DType.f8e4m3: _np.float32, DType.f8e5m2: _np.float32, DType.i8: _np.int8, DType.i16: _np.int16,
             DType.i32: _np.int32, DType.i64: _np.int64, DType.u8: _np.uint8,
             DType.bool: _np.bool_}


def numpy_dtype(t) -> _np.dtype:
    """The numpy dtype that holds values of tgraph type t (float32 for bf16 and the 8-bit floats)."""
    return _np.dtype(_NUMPY_OF[dtype(t)])


def device(d) -> Device:
    """A Device from "cpu", "cuda", "cuda:1", "best" or a Device."""
    if isinstance(d, Device):
        return d
    if d is None or d == "best":
        return Device.best()
    s = str(d)
    if s == "cpu":
        return Device.cpu()
    if s.startswith("cuda"):
        return Device.cuda(int(s.split(":")[1]) if ":" in s else 0)
    raise Error(f"[python] unknown device {d!r}: use 'cpu', 'cuda', 'cuda:N' or 'best'")


# ---- tensors as Python values: operators, indexing -----------------------------------------

def _graph(t: Tensor) -> Graph:
    return t.graph


_FLOATS = (DType.f32, DType.f16, DType.bf16, DType.f64)


def _as_tensor(g: Graph, v, like: Tensor | None = None) -> Tensor:
    """v as a tensor of g: tensors pass; Python numbers take like's type (exactly, for integers);
    arrays are constants (a float array with a float `like` takes its type)."""
    if isinstance(v, Tensor):
        return v
    if isinstance(v, (bool, numbers.Number)) and not isinstance(v, _np.ndarray):
        t = like.dtype if like is not None else (DType.bool if isinstance(v, bool) else
                                                 DType.i32 if isinstance(v, numbers.Integral) else DType.f32)
        if t in _FLOATS or t == DType.bool:
            return g.scalar(float(v), t)
        return g.constant(_np.array(v, dtype=numpy_dtype(t)))  # no trip through a double
    a = _np.asarray(v)
    if like is not None and like.dtype in _FLOATS and a.dtype.kind == "f" and dtype(a.dtype) != like.dtype:
        return g.constant(a.astype(_np.float32), dtype=like.dtype)
    return g.constant(a)


def _kind(v) -> str:
    """'b', 'i' or 'f': the category of a Python value or an array (numpy's kinds, u as i)."""
    if isinstance(v, Tensor):
        return "f" if v.dtype in _FLOATS else "b" if v.dtype == DType.bool else "i"
    if isinstance(v, bool):
        return "b"
    if isinstance(v, numbers.Integral):
        return "i"
    if isinstance(v, numbers.Real):
        return "f"
    k = _np.asarray(v).dtype.kind
    return "i" if k == "u" else k


def _operands(self: Tensor, other, true_div: bool = False):
    """(self, other) as tensors of one type, as numpy and JAX promote: a Python number takes the
    tensor's type unless it is of a higher kind (a float with an int tensor gives f32); two
    tensors meet at promote_types; true division of integers is done in f32."""
    g = _graph(self)
    order = "bif"
    if not isinstance(other, Tensor) and order.index(_kind(other)) > order.index(_kind(self)):
        self = g.cast(self, DType.f32 if _kind(other) == "f" else DType.i32)
    o = _as_tensor(g, other, like=self)
    if o.dtype != self.dtype:
        t = promote_types(self.dtype, o.dtype)
        self, o = (x if x.dtype == t else g.cast(x, t) for x in (self, o))
    if true_div and self.dtype not in _FLOATS:
        self, o = g.cast(self, DType.f32), g.cast(o, DType.f32)
    return self, o


def _binary(name: str, reverse: bool = False):
    def op(self: Tensor, other):
        a, b = _operands(self, other, true_div=name == "div")
        fn = name
        if name.startswith("logical_") and a.dtype != DType.bool:  # & | ^ on integers: bitwise
            fn = "bitwise_" + name[len("logical_"):]
        return getattr(_graph(self), fn)(b, a) if reverse else getattr(_graph(self), fn)(a, b)
    op.__name__ = f"__{'r' if reverse else ''}{name}__"
    return op


for _py, _op in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                 ("mod", "floor_mod"), ("pow", "pow"), ("matmul", "matmul"),
                 ("and", "logical_and"), ("or", "logical_or"), ("xor", "logical_xor")]:
    setattr(Tensor, f"__{_py}__", _binary(_op))
    setattr(Tensor, f"__r{_py}__", _binary(_op, reverse=True))
for _py, _op in [("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal")]:
    setattr(Tensor, f"__{_py}__", _binary(_op))


def _floordiv(self: Tensor, other, reverse=False):
    a, b = _operands(self, other)
    if reverse:
        a, b = b, a
    g = _graph(self)
    if a.dtype in _FLOATS:
        return g.floor(g.div(a, b))
    return g.div(g.sub(a, g.floor_mod(a, b)), b)  # exact: the difference is a multiple of b


Tensor.__floordiv__ = _floordiv
Tensor.__rfloordiv__ = lambda self, other: _floordiv(self, other, reverse=True)
Tensor.__neg__ = lambda self: _graph(self).neg(self)
Tensor.__abs__ = lambda self: _graph(self).abs(self)
Tensor.__invert__ = lambda self: (_graph(self).logical_not(self) if self.dtype == DType.bool
                                  else _graph(self).bitwise_not(self))
def _no_truth_value(self: Tensor):
    raise Error("[python] a graph tensor has no truth value before it runs: use g.if_else / g.select")


Tensor.__bool__ = _no_truth_value
Tensor.T = property(lambda self: _graph(self).transpose(self, list(range(self.rank))[::-1]))


def _astype(self: Tensor, t) -> Tensor:
    return _graph(self).cast(self, dtype(t))


def _reshape(self: Tensor, *shape) -> Tensor:
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = tuple(shape[0])
    return _graph(self).reshape(self, list(shape))


Tensor.astype = _astype
Tensor.reshape = _reshape
# numpy's names: x.sum(axis=1, keepdims=True)
Tensor.sum = lambda self, axis=None, keepdims=False: _graph(self).reduce_sum(self, _axes(axis), keepdims)
Tensor.mean = lambda self, axis=None, keepdims=False: _graph(self).reduce_mean(self, _axes(axis), keepdims)
Tensor.max = lambda self, axis=None, keepdims=False: _graph(self).reduce_max(self, _axes(axis), keepdims)
Tensor.min = lambda self, axis=None, keepdims=False: _graph(self).reduce_min(self, _axes(axis), keepdims)


def _axes(a) -> list[int]:
    return [] if a is None else [a] if isinstance(a, int) else list(a)


def _getitem(self: Tensor, key) -> Tensor:
    """numpy basic indexing: ints, slices (any step), ... and None (a new axis of size 1)."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > self.rank:
        raise IndexError(f"too many indices for a tensor of rank {self.rank}: {key!r}")
    full = []
    for k in key:
        if k is Ellipsis:
            full.extend([_builtins.slice(None)] * (self.rank - used))
        else:
            full.append(k)
    full.extend([_builtins.slice(None)] * (self.rank - sum(1 for k in full if k is not None)))
    begin, end, strides = [], [], []
    begin_mask = end_mask = squeeze_mask = 0
    new_axes = []
    out_dim = 0
    dim = 0
    for k in full:
        if k is None:
            new_axes.append(out_dim)
            out_dim += 1
            continue
        if isinstance(k, (bool, _np.bool_)):
            raise IndexError("boolean indices are not supported: use g.select or g.gather")
        if isinstance(k, (int, _np.integer)):
            begin.append(int(k))
            end.append(int(k) + 1 if int(k) != -1 else 0)
            strides.append(1)
            if int(k) == -1:
                end_mask |= 1 << dim
            squeeze_mask |= 1 << dim
        elif isinstance(k, _builtins.slice):
            step = 1 if k.step is None else int(k.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            begin.append(0 if k.start is None else int(k.start))
            end.append(0 if k.stop is None else int(k.stop))
            strides.append(step)
            if k.start is None:
                begin_mask |= 1 << dim
            if k.stop is None:
                end_mask |= 1 << dim
            out_dim += 1
        else:
            raise IndexError(f"tgraph tensors take ints, slices, ... and None as indices, got {k!r}; "
                             "use g.gather / g.gather_nd for tensor indices")
        dim += 1
    g = _graph(self)
    y = g.strided_slice(self, SliceDesc(begin=begin, end=end, strides=strides, begin_mask=begin_mask,
                                        end_mask=end_mask, squeeze_mask=squeeze_mask))
    return g.expand_dims(y, new_axes) if new_axes else y


Tensor.__getitem__ = _getitem


# ---- compiling and running -------------------------------------------------------------------

def _feed_list(feeds) -> list:
    """[(placeholder, TensorType)] from a list of placeholders or a dict placeholder -> type."""
    out = []
    items = feeds.items() if isinstance(feeds, dict) else ((f, None) for f in feeds)
    for t, ty in items:
        if ty is None:
            ty = t.type
        elif not isinstance(ty, TensorType):
            shape, dt = ty
            ty = TensorType(shape, dt)
        out.append((t, ty))
    return out


def _options(device_, precision, disable_type_inference, optimize, free_output_layouts=False,
             switches=None) -> CompileOptions:
    o = CompileOptions()
    o.device = device(device_)
    if isinstance(precision, Precision):
        o.precision = precision
    elif str(precision) in Precision.__members__:
        o.precision = Precision.__members__[str(precision)]
    else:
        raise Error(f"[python] unknown precision {precision!r}: use one of {', '.join(Precision.__members__)}")
    o.disable_type_inference = bool(disable_type_inference)
    o.optimize = bool(optimize)
    o.free_output_layouts = bool(free_output_layouts)
    if switches:
        # {"TGRAPH_NO_FUSION": "1"} or {"TGRAPH_NO_FUSION": True}: an unknown name is an error at compile
        o.switches = {str(k): ("1" if v is True else "0" if v is False else str(v)) for k, v in dict(switches).items()}
    return o


def _compile(self: Graph, feeds, targets: Sequence[Tensor] | Tensor, target_ops: Iterable[Operation] = (),
             *, device=None, precision="f32", disable_type_inference=False, optimize=True,
             free_output_layouts=False, switches=None) -> Executable:
    """Compiles the part of the graph that computes targets (and runs target_ops).

    feeds: the placeholders in input order (their declared types), or a dict placeholder ->
    TensorType / (shape, dtype). device: "cpu", "cuda", "cuda:N" or a Device (default: the best
    present). precision: "f32", "tf32", "bf16" or "f16" for matmul and convolution.
    free_output_layouts: rank-4 outputs may come back channels-last (no transpose at the end);
    Executable.output_permutations says how to view each as the value asked for.
    switches: debugging switches for this executable only, by their environment names
    ({"TGRAPH_NO_FUSION": "1"}; docs/switches.md lists which may be set this way).
    """
    if isinstance(targets, Tensor):
        targets = [targets]
    return self._compile(_feed_list(feeds), list(targets), list(target_ops),
                         _options(device, precision, disable_type_inference, optimize, free_output_layouts,
                                  switches))


def _feed(v, t: DType, what: str, cast: bool = False) -> _np.ndarray:
    """v as an array for a feed of type t. One rule everywhere (as the CLI and set_variable): a
    value is converted only where the conversion cannot change it -- a widening (f16 -> f32,
    i32 -> i64) or integers that all fit the narrower type (numpy's default int64 into an i32
    feed) -- and refused otherwise (f64 -> f32 narrowing, i32 -> f32), unless cast=True asks
    for it (within its kind: float to float, integer to integer or float). Python numbers and
    lists have no dtype of their own: they take the feed's, within their kind, as numpy's and
    JAX's weakly typed scalars do."""
    if isinstance(v, DeviceTensor):
        v = v.numpy()
    typed = isinstance(v, (_np.ndarray, _np.generic)) or hasattr(v, "__array__")
    a = _np.asarray(v)
    want = _np.dtype(numpy_dtype(t))
    if a.dtype == want:
        return a
    if not cast and typed:
        exact = _np.can_cast(a.dtype, want, casting="safe")
        if not exact and a.dtype.kind in "iub" and want.kind in "iu" and a.size:
            info = _np.iinfo(want)
            exact = bool(a.min() >= info.min and a.max() <= info.max)
        if not exact:
            raise Error(f"[run] {what}: a {a.dtype} array cannot feed a {t.name} input without changing its "
                        f"values; convert it (.astype(numpy.{want.name})) or pass cast=True")
    elif not _np.can_cast(a.dtype, want, casting="same_kind"):
        given = f"a {a.dtype} array" if typed else f"a Python value (as {a.dtype})"
        raise Error(f"[run] {what}: {given} cannot feed a {t.name} input")
    return a.astype(want)


def _run(self: Graph, feeds: dict, targets: Sequence[Tensor] | Tensor, target_ops: Iterable[Operation] = (),
         *, cast: bool = False):
    """Compiles (cached by signature) and runs once: feeds maps placeholders to arrays (of the
    placeholders' dtypes, or any convertible one with cast=True)."""
    single = isinstance(targets, Tensor)
    feed_list = [(t, _feed(v, t.dtype, f"feed {t.name}", cast)) for t, v in feeds.items()]
    out = self._run(feed_list, [targets] if single else list(targets), list(target_ops))
    return out[0] if single else out


def _for_loop(self: Graph, *args, body=None):
    """g.for_loop(n, init, body) or g.for_loop(lower, upper, step, init, body): for i in range,
    args = body(i, *args), on the device; returns the last args. Bounds may be ints."""
    if body is None:
        *args, body = args
    *bounds, init = args
    bounds = [_as_tensor(self, b, None) if not isinstance(b, Tensor) else b for b in bounds]
    bounds = [b if b.dtype == DType.i32 else self.cast(b, DType.i32) for b in bounds]
    if len(bounds) == 1:
        return self._for_n(bounds[0], list(init), body)
    if len(bounds) == 2:
        bounds.append(self.scalar(1, DType.i32))
    if len(bounds) != 3:
        raise TypeError("for_loop(n, init, body) or for_loop(lower, upper[, step], init, body)")
    return self._for_range(*bounds, list(init), body)


def _constant(self: Graph, value, name: str = "", dtype=None) -> Tensor:
    """A constant from an array (numpy's dtype, or `dtype` when given)."""
    a = _np.asarray(value)
    if dtype is not None:
        t = _dtype_of(dtype)
        if t == DType.bf16:
            return self.cast(self._constant(a.astype(_np.float32), name), DType.bf16)
        a = a.astype(numpy_dtype(t), copy=False)  # the graph copies it once, below
    return self._constant(a, name)


def _sized_op(self, kind: str, *args, **kwargs):
    """The sized_op of `kind` (reshape, broadcast_to, pad, slice, tile, arange, resize): the
    Graph.<kind>_sized method, whose sizes are tensors computed from other tensors' sizes."""
    kinds = ("reshape", "broadcast_to", "pad", "slice", "tile", "arange", "resize")
    if kind not in kinds:
        raise Error(f"[sized_op] kind {kind!r} is not one of {', '.join(kinds)}")
    return getattr(self, kind + "_sized")(*args, **kwargs)


Graph.sized_op = _sized_op
Graph._constant = Graph.constant
Graph.constant = _constant
Graph.compile = _compile
Graph.run = _run
Graph.for_loop = _for_loop


def _exe_run(self: Executable, inputs: Sequence | dict = (), *, cast: bool = False, timeout: float = 0.0):
    """Runs on host arrays, in the order of the feeds or as a dict by feed name; returns numpy
    arrays. Each array has its feed's dtype; cast=True converts others (within their kind).
    timeout: seconds the run may take (0: no limit); past it, or on Ctrl-C, the run stops
    between steps (tgraph.Error, KeyboardInterrupt) and no variable changes."""
    if timeout < 0:
        raise Error(f"[run] timeout must be >= 0 seconds, got {timeout}")
    types = self.input_types
    if isinstance(inputs, dict):
        names = self.input_names
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise Error(f"[run] no feed named {unknown[0]!r} (the feeds: {', '.join(map(repr, names))})")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise Error(f"[run] no value for feed {missing[0]!r} (the feeds: {', '.join(map(repr, names))})")
        inputs = [inputs[n] for n in names]
    if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__len__"):
        raise Error(f"[run] give the inputs as a list (in feed order) or a dict by feed name, not {type(inputs).__name__}")
    if len(inputs) != len(types):
        raise Error(f"[run] {len(inputs)} inputs given for {len(types)} feeds "
                    f"({', '.join(repr(t) for t in types)})")
    return self._run([_feed(v, t.dtype, f"input {i} ({t!r})", cast) for i, (v, t) in enumerate(zip(inputs, types))],
                     float(timeout), _threading.current_thread() is _threading.main_thread())


def _exe_call(self: Executable, *inputs):
    out = _exe_run(self, list(inputs))
    return out[0] if len(out) == 1 else tuple(out)


Executable.run = _exe_run
Executable.__call__ = _exe_call


def _load_onnx(path: str, input_shapes: dict | Sequence | None = None):
    """Imports an ONNX model file: an OnnxModel with .graph, .inputs, .outputs and .compile().
    input_shapes fixes symbolic input dims, by input name (dict) or by position (list)."""
    by_name = dict(input_shapes) if isinstance(input_shapes, dict) else {}
    in_order = list(input_shapes) if input_shapes is not None and not isinstance(input_shapes, dict) else []
    return onnx._import(str(path), by_name, in_order)


if onnx.available:
    onnx.load = _load_onnx
    onnx.OnnxModel.compile = lambda self, *, device=None, precision="f32", disable_type_inference=False, \
        optimize=True, switches=None: self._compile(_options(device, precision, disable_type_inference, optimize,
                                                             switches=switches))



# ---- functions on tensors, and jit ------------------------------------------------------------

def _op_function(name: str):
    """tg.<op>(x, ...): the Graph method of the graph the first tensor argument belongs to."""
    method = getattr(Graph, name)

    def fn(*args, **kwargs):
        for a in list(args) + list(kwargs.values()):
            seq = a if isinstance(a, (list, tuple)) else [a]
            for t in seq:
                if isinstance(t, Tensor):
                    return method(t.graph, *args, **kwargs)
        raise Error(f"[python] tg.{name} needs a tensor argument (or call it on a Graph)")
    fn.__name__ = name
    fn.__doc__ = method.__doc__
    return fn


_NOT_OPS = {"placeholder", "constant", "scalar", "variable", "compile", "run", "dot", "num_nodes",
            "arange", "random_state", "control_dependency", "if_else", "for_loop", "while_loop", "gradients"}
for _name in [n for n in dir(Graph) if not n.startswith("_") and n not in _NOT_OPS]:
    if _name not in globals():
        globals()[_name] = _op_function(_name)


class jit:
    """Compiles a Python function of tensors, as jax.jit does: at the first call with a given
    signature (shapes and element types of the array arguments) the function is called once on
    placeholders to build a graph, which is compiled and cached; every call runs the executable.
    The function uses tensor operators and tg.<op> functions (tg.exp, tg.matmul, ...).

        @tg.jit(device="cuda")
        def f(x, w):
            return tg.relu(x @ w + 1.0)
        y = f(np.ones((8, 4), np.float32), np.ones((4, 2), np.float32))
    """

    def __init__(self, fn=None, *, device=None, precision="f32"):
        self._fn = fn
        self._device = device
        self._precision = precision
        self._cache: dict = {}
        if fn is not None:
            self.__doc__ = fn.__doc__
            self.__name__ = getattr(fn, "__name__", "jit")

    def __call__(self, *args):
        if self._fn is None:  # @tg.jit(device=...) form
            return jit(args[0], device=self._device, precision=self._precision)
        # Python numbers and bools are static, as JAX's static arguments: part of the signature
        # and seen by the function as themselves (so x * 2.0 keeps x's type, and flags work)
        static = [isinstance(a, (bool, numbers.Number)) and not isinstance(a, _np.ndarray) for a in args]
        arrays = [_np.asarray(a) for a, st in zip(args, static) if not st]
        key = tuple(("static", type(a).__name__, a) if st else (_np.shape(a), _np.asarray(a).dtype.str)
                    for a, st in zip(args, static))
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._trace(args, static)
        exe, single = entry
        out = exe.run(arrays)
        return out[0] if single else tuple(out)

    def _trace(self, args, static):
        g = Graph()
        xs, feeds = [], []
        for i, (a, st) in enumerate(zip(args, static)):
            if st:
                xs.append(a)
            else:
                a = _np.asarray(a)
                feeds.append(g.placeholder(list(a.shape), dtype(a.dtype), f"arg{i}"))
                xs.append(feeds[-1])
        result = self._fn(*xs)
        single = isinstance(result, Tensor)
        outs = [result] if single else list(result) if isinstance(result, (list, tuple)) else [result]
        if not all(isinstance(o, Tensor) for o in outs):
            raise Error(f"[jit] {getattr(self._fn, '__name__', 'the function')} must return a tensor or a "
                        "tuple of tensors")
        return g.compile(feeds, outs, device=self._device, precision=self._precision), single


__all__ = [n for n in dir() if not n.startswith("_")]
