"""The PyTorch frontend: run an unchanged nn.Module through tgraph.

    import tgraph.torch
    fast = tgraph.torch.compile(model)            # model: any nn.Module, left as it is
    y = fast(x)                                   # torch tensors in and out, same device

    compiled = torch.compile(model, backend=tgraph.torch.backend)   # or backend="tgraph"
    trained = torch.compile(model, backend="tgraph_train", dynamic=False)  # forward + backward

`compile` exports the module with torch.export, lowers it to core ATen ops and builds one
tgraph graph from them: one executable per input signature (shapes, dtypes, device), made at
the first call with that signature (where export fails, the module runs through TorchDynamo
with `backend` instead). Parameters and buffers are read at compile time (as torch.jit.freeze
does): call `.recompile()` after changing the weights. `compile` is for inference: the module
runs in the mode it is in (call model.eval() first for dropout and batch norm); training goes
through the "tgraph_train" backend, whose forward and backward graphs both run in tgraph.
Tensors stay where they are: CUDA tensors run on the GPU through DLPack without a copy.
"""
from __future__ import annotations

import operator
import os
import sys
import threading
import weakref
from typing import Callable

import torch
from torch.utils.dlpack import from_dlpack as _from_capsule
from torch.utils.dlpack import to_dlpack as _to_capsule

import tgraph as tg
from tgraph import _torch_cache
from tgraph._aten import (  # noqa: F401  (the converter; re-exported for users and tests)
    _CONVERTERS, Converted, InputOut, SizeOut, UnsupportedOp, _is_dynamic, _packet_name, convert, convertible, tg_dtype,
)
from tgraph._decomp import decompositions, export_decompositions
from tgraph._size_checks import accepts as _accepts, size_guards as _size_guards, traced_dims as _traced_dims

__all__ = ["compile", "backend", "training_backend", "TorchModule", "convert", "UnsupportedOp", "stats"]


def _channels_last(t: torch.Tensor) -> bool:
    """A 4-D tensor stored channels-last (NHWC memory, NCHW shape), as tgraph's own training
    forward returns the activations it saves for the backward (free_output_layouts)."""
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def _signature(values) -> tuple:
    """What an executable is specialised on: shapes, dtypes, devices and channels-last storage
    of the tensors, and every other value itself. (Computed at every call of a training graph,
    for hundreds of tensors: one pass, no helper call per tensor.)"""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            s = v.shape
            out.append((s, v.dtype, v.device, len(s) == 4 and not v.is_contiguous()
                        and v.is_contiguous(memory_format=torch.channels_last)))
        else:
            out.append(("py", v))
    return tuple(out)


def _loose_signature(values) -> tuple:
    """What a graph with symbolic sizes is specialised on: each tensor's dtype, rank, device and
    channels-last storage (its sizes are the graph's to take at run time), not the sizes."""
    return tuple((v.dtype, v.dim(), v.device, _channels_last(v)) if isinstance(v, torch.Tensor) else "py"
                 for v in values)


def _batch_free(values) -> tuple:
    """The sizes of every tensor's dims past the first: what an executable whose batch dims
    alone are dynamic is specialised on besides _loose_signature."""
    return tuple(tuple(v.shape[1:]) for v in values if isinstance(v, torch.Tensor))


def _symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether TorchDynamo / export traced `gm` with symbolic sizes (dynamic=True, mark_dynamic,
    dynamic_shapes): a size placeholder, or a tensor placeholder with a symbolic dim."""
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        sizes = v.shape if isinstance(v, torch.Tensor) else [v] if isinstance(v, torch.SymInt) else []
        if any(isinstance(d, torch.SymInt) and not d.node.expr.is_Integer for d in sizes):
            return True
    return False


def _device_of(args) -> tg.Device:
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            return tg.Device.cuda(a.device.index or 0)
    return tg.Device.cpu()


class _TensorOut:
    """Marks a tensor output among a cached executable's outputs (tgraph/_torch_cache.py)."""


_TENSOR_OUT = _TensorOut()


def _remembered(last, plain: torch.Tensor, fed: torch.Tensor, view):
    """_Compiled.seen's entry for a position after `plain` went in as `fed` with tgraph view
    `view`: (weak reference, address, None) the first time, (tensor, address, view) when the
    same tensor at the same address came the call before too; None where a copy went in."""
    if fed.data_ptr() != plain.data_ptr():
        return None
    ptr = plain.data_ptr()
    if last is not None and last[2] is None and last[0]() is plain and last[1] == ptr:
        return (plain, ptr, view)
    try:
        return (weakref.ref(plain), ptr, None)
    except TypeError:
        return None


class _Compiled:
    """One executable for one input signature, with how its outputs map back to torch."""

    symbolic = False  # True: its graph keeps torch's symbolic sizes, every size; "batch": the leading dims only
    pending_store = None  # (key, meta) to write to the compile cache after its first run

    def __init__(self, exe: tg.Executable, outs: list, random: bool, nhwc_inputs=(), donate=()):
        self.exe = exe
        # Positions of inputs torch gives up (a backward's saved activations, AOTAutograd's
        # donated buffers): the run may put its own buffers in their memory once read.
        self.donate = list(donate)
        self.outs = outs  # tg.Tensor (by position among the targets) or a Python value
        self.random = random  # the last feed is a Philox state (see _Ctx.random_uniform)
        self.nhwc = set(nhwc_inputs)  # positions fed as their NHWC storage (see _compile_graph)
        self.perms = [tuple(p) for p in exe.output_permutations]  # channels-last outputs' views
        # Per input position, what was passed there last: a training step passes the same
        # parameters and buffers every call, and their conversion (detach, DLPack) was most of the
        # call's host time. A tensor seen once is remembered weakly (a saved activation, passed
        # once, must not be kept alive: its memory is the forward's graph memory); one passed
        # again, the same object at the same address, keeps its tgraph view for the next calls.
        self.seen: list = [None] * len(exe.input_types)

    def __call__(self, flat_inputs: list[torch.Tensor]) -> list:
        dev = self.exe.device
        cuda = dev.kind == "cuda"
        ins = []
        seen = self.seen
        for i, t in enumerate(flat_inputs):
            last = seen[i] if i < len(seen) else None
            if last is not None and last[2] is not None and last[0] is t and last[1] == t.data_ptr():
                ins.append(last[2])  # the same tensor as at the last two calls: its view as it was
                continue
            plain = t
            t = t.detach()
            t = t.permute(0, 2, 3, 1).contiguous() if i in self.nhwc else t.contiguous()
            if cuda and not (t.is_cuda and t.device.index == dev.index):
                t = t.to(f"cuda:{dev.index}")
            if not cuda and t.device.type != "cpu":
                t = t.cpu()
            # a bare capsule: torch's __dlpack__ protocol method costs ~9 us a tensor in Python,
            # and this call orders the run on torch's stream itself (run_device(stream=))
            ins.append(tg.from_dlpack(_to_capsule(t)) if cuda else tg.from_dlpack(t))
            if i < len(seen):  # reusable only where the tensor itself went in (no copy, no permute)
                seen[i] = _remembered(last, plain, t, ins[-1])
        if self.random:  # a fresh stream per run, drawn from torch's generator
            seed = torch.randint(0, 2 ** 62, (1,), dtype=torch.int64)
            ins.append(tg.from_dlpack(torch.cat([seed, torch.zeros(1, dtype=torch.int64)])))
        if cuda:
            # In the order of torch's current stream, as a torch op is: the run waits for the
            # work queued there (the inputs' producers) and that stream's later work for the
            # run; nothing blocks the host, which goes on queueing the next ops meanwhile.
            results = self.exe.run_device(ins, stream=torch.cuda.current_stream(dev.index).cuda_stream,
                                          donate=self.donate)
        else:
            results = self.exe.run_device(ins)
        it = iter(zip(results, self.perms))
        out = []
        for o in self.outs:
            if isinstance(o, tg.Tensor) or o is _TENSOR_OUT:
                r, perm = next(it)
                # the run already ordered torch's stream after it: no event per output
                r = _from_capsule(r.__dlpack__(stream=-1)) if cuda else torch.from_dlpack(r)
                out.append(r.permute(*perm) if perm else r)  # channels-last storage, NCHW view
            else:
                out.append(o.value(flat_inputs) if isinstance(o, (SizeOut, InputOut)) else o)
        return out


_STATS = {"executables": 0, "cache_hits": 0}


def stats() -> dict:
    """Counters of this process's tgraph.torch work: "executables", how many tgraph executables
    it has compiled (one per graph and input signature; a dynamic graph's one serves every size);
    "cache_hits", how many tgraph.torch.compile took from the disk cache instead
    (tgraph/_torch_cache.py)."""
    return dict(_STATS)


def _executable(g: tg.Graph, feeds: list, outs: list, random: bool, device, precision: str,
                free_layouts: bool = False, nhwc_inputs=(), donate=()) -> _Compiled:
    """Compiles a converted graph for its tensor outputs."""
    _STATS["executables"] += 1
    exe = g.compile(feeds, [o for o in outs if isinstance(o, tg.Tensor)], device=device, precision=precision,
                    free_output_layouts=free_layouts)
    return _Compiled(exe, outs, random, nhwc_inputs, donate)


# torch.export traces under process-wide state (its fake tensor mode): two exports at once, from
# threads calling a module for the first time together, fail inside torch. One at a time.
_EXPORT_LOCK = threading.Lock()


class TorchModule(torch.nn.Module):
    """An nn.Module that runs `module` through tgraph (what tgraph.torch.compile returns)."""

    def __init__(self, module: torch.nn.Module, device=None, precision: str = "f32", dynamic: bool = False):
        super().__init__()
        self._module = module
        self._device = device
        self._precision = precision
        self._dynamic = dynamic
        self._cache: dict = {}
        self.dynamo_reason = None  # why the last signature built went through TorchDynamo, if it did
        self._dynamo_module = None  # that route's torch.compile'd module: one for every signature
        self._export_fails = False  # torch.export failed at some signature: the TorchDynamo route for all

    def recompile(self) -> None:
        """Forgets the compiled executables (after the module's weights changed)."""
        self._cache.clear()

    def forward(self, *args, **kwargs):
        from torch.utils import _pytree as pytree
        flat, _ = pytree.tree_flatten((args, kwargs))
        key = (self._module.training,) + _signature(flat)
        # dynamic: one executable for every size of the same dtypes and ranks, where it could be made
        # (torch fixes a dim whose example size is 0 or 1, so an executable may take only some sizes)
        loose = (self._module.training, "dynamic") + _loose_signature(flat) if self._dynamic else None
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]

        def lookup():
            e = self._cache.get(key)
            if e is None and loose:
                e = next((c for c in self._cache.get(loose, []) if _accepts(c[0], tensors)), None)
            return e
        entry = lookup()
        if entry is None:
            with _EXPORT_LOCK:  # the first call of each signature compiles once, whatever the threads
                entry = lookup()
                if entry is None:
                    entry = self._build(args, kwargs)
                    if getattr(entry[0], "symbolic", False):
                        self._cache.setdefault(loose, []).append(entry)
                    else:
                        self._cache[key] = entry
        compiled, spec = entry
        if spec is None:  # the TorchDynamo route (_through_dynamo)
            return compiled(*args, **kwargs)
        out = compiled(tensors)
        pending = getattr(compiled, "pending_store", None)
        if pending is not None:  # cached after its first run: the file then holds the kernels it used
            compiled.pending_store = None
            _torch_cache.store_later(pending[0], compiled.exe, pending[1])
        return pytree.tree_unflatten(out, spec)

    def _build(self, args, kwargs):
        from torch.utils import _pytree as pytree
        if self._export_fails:  # (at another signature: it would again)
            return self._through_dynamo()
        flat, _ = pytree.tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        py = tuple(repr(a) for a in flat if not isinstance(a, torch.Tensor))
        # dynamic: the entries of an executable for every size, of one for every batch size at
        # these other sizes, and of one for these sizes alone (where none of the sizes could be
        # kept): each answers only for the sizes its key names
        sigs = [(_signature(flat), py)]
        if self._dynamic:
            sigs = [(_loose_signature(flat), py), (_loose_signature(flat), _batch_free(flat), py)] + sigs
        keys = _torch_cache.key(self._module, sigs, (self._device, self._precision, self._dynamic))
        for k in keys or []:
            hit = self._from_cache(k, tensors)
            if hit is not None:
                return hit
        entry = self._build_uncached(args, kwargs)
        compiled, spec = entry
        symbolic = getattr(compiled, "symbolic", False)
        k = None if keys is None else keys[0 if symbolic is True else 1 if symbolic == "batch" else -1]
        if k is not None and spec is not None and isinstance(compiled, _Compiled) and not any(compiled.perms) \
                and not any(isinstance(o, InputOut) for o in compiled.outs):
            compiled.pending_store = (k, {
                "outs": ["tensor" if isinstance(o, tg.Tensor) else {"py": o} for o in compiled.outs],
                "random": compiled.random, "symbolic": compiled.symbolic,
                "guards": [list(g) for g in getattr(compiled, "guards", ())],
                "spec": pytree.treespec_dumps(spec)})
        return entry

    def _from_cache(self, k: str, tensors: list):
        from torch.utils import _pytree as pytree
        got = _torch_cache.load(k)
        if got is None:
            return None
        exe, meta = got
        try:
            outs = [_TENSOR_OUT if o == "tensor" else o["py"] for o in meta["outs"]]
            compiled = _Compiled(exe, outs, meta["random"])
            compiled.symbolic = meta["symbolic"]
            compiled.guards = [tuple(g) for g in meta["guards"]]
            spec = pytree.treespec_loads(meta["spec"])
        except (KeyError, TypeError, ValueError):
            return None
        if not _accepts(compiled, tensors):  # (a per-size executable: these exact sizes)
            return None
        _STATS["cache_hits"] += 1
        return compiled, spec

    def _build_uncached(self, args, kwargs):
        if self._dynamic:
            try:
                return self._build_from(args, kwargs, dynamic=True)
            except tg.Error as e:
                why = str(e).splitlines()[0]
            # The leading (batch) dims alone: a model whose other sizes tgraph cannot keep
            # symbolic (an adaptive pooling of a free image size, a view of a derived size) still
            # takes every batch size in one executable, one per size of its other dims.
            try:
                entry = self._build_from(args, kwargs, dynamic="batch")
                if getattr(entry[0], "symbolic", False):
                    _report_line(f"tgraph: only the batch size kept dynamic (one executable per other size): {why}")
                    return entry
            except tg.Error:
                pass
            entry = self._build_from(args, kwargs, dynamic=False)
            if entry[1] is None:  # torch.export fails whatever the sizes: TorchDynamo keeps them dynamic
                _report_line(f"tgraph: through TorchDynamo, its graphs' sizes dynamic ({self.dynamo_reason})")
            else:
                _report_line(f"tgraph: dynamic sizes not kept, compiling per size: {why}")
            return entry
        return self._build_from(args, kwargs, dynamic=False)

    def _build_from(self, args, kwargs, dynamic):
        """dynamic: False, True (every dim of every tensor input may vary) or "batch" (dim 0)."""
        from torch.utils import _pytree as pytree
        shapes = None
        if dynamic:  # torch specialises what must not vary
            free = (lambda t: range(t.dim())) if dynamic is True else (lambda t: range(min(t.dim(), 1)))
            auto = lambda t: {d: torch.export.Dim.AUTO for d in free(t)} if isinstance(t, torch.Tensor) \
                else None  # noqa: E731
            shapes = tuple(pytree.tree_map(auto, a) for a in args) + tuple(pytree.tree_map(auto, v)
                                                                           for v in (kwargs or {}).values())
        try:
            with torch.no_grad():
                ep = torch.export.export(self._module, tuple(args), kwargs or None, dynamic_shapes=shapes)
                if dynamic or not _converts_as_exported(ep):
                    ep = ep.run_decompositions(export_decompositions())
        except Exception as e:  # noqa: BLE001  (torch.export refuses some models; tracing may not)
            if isinstance(e, tg.Error):
                raise
            first = (str(e).strip().splitlines() or [""])[0]
            if dynamic:
                raise tg.Error(f"[torch] torch.export with dynamic sizes failed: {type(e).__name__}: {first[:120]}")
            self.dynamo_reason = f"torch.export failed: {type(e).__name__}: {first[:120]}"
            self._export_fails = True
            return self._through_dynamo()
        sig = ep.graph_signature
        user = [s.arg.name for s in sig.input_specs if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
        constants = {}
        state = {**ep.state_dict, **ep.constants}
        for s in sig.input_specs:
            if s.kind != torch.export.graph_signature.InputKind.USER_INPUT:
                constants[s.arg.name] = state[s.target]
        flat, _ = pytree.tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        py_values = {}
        if len(flat) == len(user) and len(tensors) != len(user):  # Python numbers among the inputs
            py_values = {u: a for u, a in zip(user, flat) if not isinstance(a, torch.Tensor)}
            user = [u for u in user if u not in py_values]
        if len(tensors) != len(user):
            raise tg.Error(f"[torch] {len(tensors)} tensor inputs for {len(user)} exported inputs")
        # True, "batch" (only the leading dims may vary) or False
        symbolic = dynamic if dynamic and _symbolic(ep.graph_module) else False
        traced = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
        types = [tg.TensorType(_traced_dims(traced.get(u)) if symbolic else list(t.shape), tg_dtype(t.dtype))
                 for u, t in zip(user, tensors)]
        try:
            g, feeds, outs, _, random = convert(ep.graph, user, constants, types, py_values)
        except tg.Error as e:
            if symbolic or getattr(e, "tg_node", None) is None or _strict():
                raise
            self.dynamo_reason = f"the export's graph has {e.tg_node}, which tgraph cannot take"
            return self._through_dynamo()  # partitioned there: the ops tgraph cannot take run in torch
        # the export also returns the new values of buffers the module mutates: inference keeps
        # the module's buffers as they are, and returns the user's outputs only
        kinds = [s.kind for s in sig.output_specs]
        outs = [o for o, k in zip(outs, kinds) if k == torch.export.graph_signature.OutputKind.USER_OUTPUT]
        device = tg.device(self._device) if self._device is not None else _device_of(tensors)
        compiled = _executable(g, feeds, outs, random, device, self._precision)
        compiled.symbolic = symbolic
        if symbolic:
            compiled.guards = _size_guards(ep, user)
        return compiled, ep.call_spec.out_spec

    def _through_dynamo(self):
        """Where torch.export fails (a model it cannot handle, or a bug of the installed torch:
        Hugging Face GPT-2 under torch 2.15), run the module through TorchDynamo with tgraph's
        backend instead: Python that export rejects (data-dependent branches) runs between the
        graphs, and each graph runs in tgraph. With dynamic=True, TorchDynamo's too: its graphs
        keep the sizes symbolic (decoders, whose cache objects torch.export refuses: one tgraph
        executable per graph for every sequence length)."""
        if self._dynamo_module is None:
            self._dynamo_module = torch.compile(self._module, backend=backend, dynamic=bool(self._dynamic))
        return self._dynamo_module, None


def compile(module: torch.nn.Module, *, device=None, precision: str = "f32",  # noqa: A001
            dynamic: bool = False) -> TorchModule:
    """An nn.Module that runs `module` through tgraph, unchanged: compiled at the first call for
    each input signature. device: where to run (default: where the inputs are); precision:
    "f32", "tf32", "bf16" or "f16" for matmul and convolution. dynamic: export with every input
    dim free (torch.export's Dim.AUTO), so one executable serves every batch size and sequence
    length torch lets vary (where a model fixes a size, or tgraph cannot keep it symbolic, one
    executable per size, with a line saying why)."""
    return TorchModule(module, device=device, precision=precision, dynamic=dynamic)


def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A torch.compile backend: torch.compile(model, backend=tgraph.torch.backend) or
    backend="tgraph", for inference. AOTAutograd functionalises and decomposes the graph
    TorchDynamo hands over (in-place ops, eval-mode batch norm and torch's fused fast paths
    arrive as core ATen; mutated buffers are written back by its wrapper), traced without
    gradients, and tgraph compiles the result for each concrete signature it is called with
    (dynamic sizes arrive as ints and are specialised, as tgraph.torch.compile does). Ops tgraph
    cannot take are left to PyTorch (_Partitioned)."""
    from torch._dynamo.backends.common import aot_autograd
    compiler = aot_autograd(fw_compiler=_compile_aten, decompositions=decompositions())
    with torch.no_grad():
        return compiler(gm, example_inputs)


def _compile_graph(aten: torch.fx.GraphModule, inputs: list, free_layouts: bool = False, symbolic: bool = False,
                   donated=frozenset()):
    """Compiles an ATen graph whose placeholders take `inputs` (tensors are fed; other values,
    such as sizes, are constants of this compile). Returns (run, single output).

    Channels-last inputs are fed as their NHWC storage (no copy), and with free_layouts the
    rank-4 outputs come back as tgraph keeps them (channels-last views where convolutions made
    them so): an AOTAutograd forward hands the activations it saves to its backward without a
    transpose on either side. `donated`: placeholder positions torch gives up (_compile_backward)."""
    placeholders = [n for n in aten.graph.nodes if n.op == "placeholder"]
    # symbolic: the sizes torch keeps symbolic stay dynamic (-1) in tgraph's graph; else the
    # graph is specialised to these inputs' sizes (the per-size fallback of a symbolic graph too)
    symbolic = symbolic and _symbolic(aten)
    names, types, py_values, perms, nhwc, donate = [], [], {}, {}, [], []
    # A size placeholder whose symbol no tensor placeholder has as a dim (AOTAutograd hands a
    # backward the sequence length s while its tensors are s - 1 long: GPT-2's shifted labels) is
    # fed as the length of a byte vector, so the graph knows it from a shape like any other size.
    named = {_sym_dim(d) for n in placeholders if isinstance(n.meta.get("val"), torch.Tensor)
             for d in n.meta["val"].shape} - {None}
    size_feeds = set()
    for k, (node, v) in enumerate(zip(placeholders, inputs)):
        name = node.name
        traced = node.meta.get("val")
        sym = _sym_dim(traced) if symbolic and not isinstance(v, torch.Tensor) else None
        if sym is not None and sym not in named:
            named.add(sym)
            size_feeds.add(name)
            names.append(name)
            types.append(tg.TensorType([-1], tg.u8))
            continue
        if isinstance(v, torch.Tensor):
            if k in donated:
                donate.append(len(names))
            if _channels_last(v):
                perms[name] = (0, 2, 3, 1)
                nhwc.append(len(names))
            names.append(name)
            shape = _traced_dims(traced) if symbolic and isinstance(traced, torch.Tensor) else list(v.shape)
            types.append(tg.TensorType(shape, tg_dtype(v.dtype)))
        else:
            py_values[name] = traced if symbolic and isinstance(traced, torch.SymInt) else v
    constants = {n.target: _attr(aten, n.target) for n in aten.graph.nodes if n.op == "get_attr"}
    g, feeds, outs, out_struct, random = convert(aten.graph, names, constants, types, py_values, perms, size_feeds)
    run = _executable(g, feeds, outs, random, _device_of(inputs), _torch_precision(), free_layouts, nhwc, donate)
    run.size_inputs = {k for k, n in enumerate(placeholders) if n.name in size_feeds}
    return run, not isinstance(out_struct, (list, tuple))


def _sym_dim(d):
    """The symbol a size is (a SymInt that is one symbol), else None."""
    if not isinstance(d, torch.SymInt):
        return None
    e = d.node.expr
    return e if getattr(e, "is_Symbol", False) else None


_SIZE_VECTORS: dict = {}  # (length, device) -> a byte vector of that length (_whole's size feeds)


def _size_vector(n: int, like: list) -> torch.Tensor:
    """A byte vector of length n on the device of the tensors in `like` (a size fed by its shape)."""
    dev = next((t.device for t in like if isinstance(t, torch.Tensor)), torch.device("cpu"))
    key = (int(n), str(dev))
    v = _SIZE_VECTORS.get(key)
    if v is None:
        if len(_SIZE_VECTORS) > 256:
            _SIZE_VECTORS.clear()
        v = _SIZE_VECTORS[key] = torch.zeros(int(n), dtype=torch.uint8, device=dev)
    return v


def _per_signature(lower: Callable[[list], torch.fx.GraphModule], free_layouts: bool = False,
                   donated=frozenset()) -> Callable:
    """A callable that compiles lower(inputs)'s ATen graph once per concrete signature (shapes,
    dtypes, devices, non-tensor values) and runs it; it takes its inputs as one list
    (AOTAutograd's boxed convention, `_boxed_call`). free_layouts, donated: see _compile_graph."""
    cache: dict = {}
    symbolic = []  # [bool] once known: the graph keeps torch's symbolic sizes, one executable for all

    def call(args: list):
        inputs = list(args)
        loose = bool(symbolic) and symbolic[0]
        key = _loose_signature(inputs) if loose else _signature(inputs)
        run = cache.get(key)
        if run is None:
            gm = lower(inputs)
            if not symbolic:
                symbolic.append(_symbolic(gm))
                if symbolic[0]:
                    run = None
                    try:  # one executable for every size, or (an op it cannot take so) one per size
                        run = _dynamic_whole(gm, inputs, free_layouts, donated)
                        out = run(inputs)
                        cache[_loose_signature(inputs)] = run
                        return out
                    except tg.Error as e:
                        if run is not None and donated:  # the failed run may have written its inputs
                            raise
                        symbolic[0] = False
                        _report_line(f"tgraph: dynamic sizes not kept, compiling per size: {str(e).splitlines()[0]}")
                        key = _signature(inputs)
            run, out = _first_run(gm, inputs, free_layouts, donated)
            cache[key] = run
            return out
        return run(inputs)
    call._boxed_call = True
    return call


def _dynamic_whole(gm: torch.fx.GraphModule, inputs: list, free_layouts: bool, donated=frozenset()):
    """The run of a graph with symbolic sizes: the whole graph in one tgraph executable whose
    dynamic dims take every size (no partitioning: a refusal raises)."""
    if any(not convertible(n) for n in gm.graph.nodes):
        bad = next(n for n in gm.graph.nodes if not convertible(n))
        raise UnsupportedOp(f"[torch] no converter for {bad.target} (node {bad.name})")
    if _views_at_dynamic_offsets(gm):  # left to torch per size (_first_run), so the offset is right
        raise UnsupportedOp("[torch] an output is a view of an input at an offset that depends on the sizes")
    return _whole(gm, inputs, free_layouts, symbolic=True, donated=donated)


def _strict() -> bool:
    """TGRAPH_TORCH_STRICT=1: an op tgraph cannot take is an error instead of running in torch."""
    return os.environ.get("TGRAPH_TORCH_STRICT", "0") not in ("", "0")


def _whole(gm: torch.fx.GraphModule, inputs: list, free_layouts: bool, symbolic: bool = False,
           donated=frozenset()) -> Callable:
    compiled, single = _compile_graph(gm, inputs, free_layouts, symbolic, donated)

    sizes = getattr(compiled, "size_inputs", set())

    def run(ins):
        r = compiled([t if isinstance(t, torch.Tensor) else _size_vector(t, ins)
                      for k, t in enumerate(ins) if isinstance(t, torch.Tensor) or k in sizes])
        return r[0] if single else tuple(r)
    return run


def _first_run(gm: torch.fx.GraphModule, inputs: list, free_layouts: bool, donated=frozenset()):
    """(run, its first result): the whole graph in one tgraph executable, or, where it has ops
    tgraph cannot take (no converter, or a converter that refuses its arguments), the graph
    partitioned around them (_Partitioned). Found by converting: each refusal names its node,
    which joins the ones left to torch, and the graph is partitioned again."""
    if any(isinstance(t, torch.Tensor) and t.numel() == 0 and t.device.type != "cpu" for t in inputs) \
            and not _strict():
        # A detector's zero boxes on the GPU: such a graph runs in tgraph (a node whose outputs
        # have no elements computes nothing there), and where tgraph cannot run it after all,
        # this signature's graph runs in torch, said once.
        try:
            return _first_run_converted(gm, inputs, free_layouts, donated)
        except (tg.Error, RuntimeError) as e:
            _report_line(f"tgraph: a graph with an empty input runs in PyTorch ({str(e).splitlines()[0][:200]})")
            run = lambda ins: gm(*ins)  # noqa: E731
            return run, run(inputs)
    return _first_run_converted(gm, inputs, free_layouts, donated)


def _first_run_converted(gm: torch.fx.GraphModule, inputs: list, free_layouts: bool, donated):
    """_first_run's conversion loop: the nodes tgraph refuses join those left to torch."""
    left = {n.name for n in gm.graph.nodes if not convertible(n)} | _views_at_dynamic_offsets(gm)
    while True:
        try:
            if left and _strict():
                bad = next(n for n in gm.graph.nodes if n.name in left)
                raise UnsupportedOp(f"[torch] no converter for {bad.target} (node {bad.name}); TGRAPH_TORCH_STRICT "
                                    "is set")
            _with_view_sources(gm, left)
            # a partitioned graph donates nothing: torch's parts may read the same inputs
            run = _whole(gm, inputs, free_layouts, donated=donated) if not left else _Partitioned(gm, left)
            out = run(inputs)
        except tg.Error as e:
            node = getattr(e, "tg_node", None)
            if node is None or node in left or _strict():
                raise
            left.add(node)
            continue
        if left:
            _report(gm, left)
        return run, out


_VIEWS = {"t", "transpose", "permute", "expand", "slice", "select", "view", "_unsafe_view", "alias", "diagonal",
          "unsqueeze", "squeeze", "unfold", "narrow", "detach", "as_strided", "_reshape_alias", "view_as_real",
          "view_as_complex"}


def _with_view_sources(gm: torch.fx.GraphModule, left: set) -> None:
    """Adds to `left` the chain of views an as_strided left to torch reads through: it reads its
    input's storage, which is the original's only when torch made the views too (a tensor that
    comes back from tgraph is contiguous)."""
    nodes = {n.name: n for n in gm.graph.nodes}
    todo = [nodes[name] for name in left if name in nodes and "as_strided" in str(nodes[name].target)]
    while todo:
        src = todo.pop().args[0] if todo[-1].args else None
        if isinstance(src, torch.fx.Node) and src.op == "call_function" and src.name not in left and \
                _packet_name(src.target) in _VIEWS:
            left.add(src.name)
            todo.append(src)


def _views_at_dynamic_offsets(gm: torch.fx.GraphModule) -> set:
    """The view chains from an input to an output whose storage offset is symbolic (x[n // 2:]):
    AOTAutograd rebuilds such an output as a view of the input from the returned tensor's own
    offset, which a tensor tgraph returns (its own memory, offset 0) does not have; torch makes
    these views, so the offset is the input's."""
    out = next((n for n in gm.graph.nodes if n.op == "output"), None)
    chains = set()
    for o in (out.args[0] if out is not None and isinstance(out.args[0], (list, tuple)) else []):
        v = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        if not isinstance(v, torch.Tensor) or not _is_dynamic(v.storage_offset()):
            continue
        chain, n = [], o
        while isinstance(n, torch.fx.Node) and n.op == "call_function" and _packet_name(n.target) in _VIEWS:
            chain.append(n.name)
            n = n.args[0] if n.args else None
        if isinstance(n, torch.fx.Node) and n.op == "placeholder":
            chains.update(chain)
    return chains


_REPORTED: set = set()


def _report(gm: torch.fx.GraphModule, left: set) -> None:
    """One line per model (per distinct set of ops) naming the ops left to PyTorch."""
    counts: dict = {}
    for n in gm.graph.nodes:
        if n.name in left and n.op == "call_function" and n.target is not operator.getitem:
            counts[str(n.target)] = counts.get(str(n.target), 0) + 1
    line = "tgraph: left to PyTorch: " + ", ".join(f"{k}" + (f" x{v}" if v > 1 else "") for k, v in
                                                   sorted(counts.items()))
    _report_line(line)


def _report_line(line: str) -> None:
    if line not in _REPORTED:
        _REPORTED.add(line)
        print(line, file=sys.stderr)


class _Part(torch.nn.Module):
    """One region of a partitioned graph that runs in tgraph, compiled per signature; a region
    tgraph fails to compile for a reason no node names runs in torch (and says so)."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__()
        self.gm = gm
        self.cache: dict = {}

    def forward(self, *inputs):
        key = _signature(inputs)
        run = self.cache.get(key)
        if run is None:
            try:
                run = _whole(self.gm, list(inputs), False)
            except tg.Error as e:
                if getattr(e, "tg_node", None) is not None or _strict():
                    raise  # _first_run partitions again without that node
                print(f"tgraph: a region of {len(self.gm.graph.nodes)} nodes runs in PyTorch: {e}", file=sys.stderr)
                run = lambda ins: self.gm(*ins)  # noqa: E731
            self.cache[key] = run
        return run(list(inputs))


class _Partitioned:
    """An ATen graph with ops tgraph cannot take (`left`, by node name): torch.fx's
    CapabilityBasedPartitioner gathers the others into regions that each run as one tgraph
    executable (_Part), and the graph between them runs in PyTorch."""

    def __init__(self, gm: torch.fx.GraphModule, left: set):
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
        from torch.fx.passes.operator_support import OperatorSupportBase

        graph = torch.fx.Graph()
        out, _ = graph.graph_copy(gm.graph, {}, return_output_node=True)
        graph.output(out)
        copy = torch.fx.GraphModule(gm, graph)

        class Support(OperatorSupportBase):
            def is_node_supported(self, submodules, node):
                if node.op != "call_function" or node.name in left:
                    return False
                if node.target is operator.getitem:  # of a tuple torch computes: torch reads it
                    src = node.args[0]
                    return not (isinstance(src, torch.fx.Node) and src.name in left)
                return True

        partitioner = CapabilityBasedPartitioner(copy, Support(), allows_single_node_partition=True)
        self.gm = partitioner.fuse_partitions(partitioner.propose_partitions())
        for node in self.gm.graph.nodes:
            if node.op == "call_module":
                setattr(self.gm, node.target, _Part(getattr(self.gm, node.target)))

    def __call__(self, inputs: list):
        return self.gm(*inputs)


def _torch_precision() -> str:
    """The precision torch itself would use for f32 matmuls and convolutions: tf32 when both
    are allowed TF32 (torch.backends.cuda.matmul / cudnn), else true f32."""
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
    return "tf32" if matmul_tf32 and torch.backends.cudnn.allow_tf32 else "f32"


def _compile_aten(gm: torch.fx.GraphModule, example_inputs: list, free_layouts: bool = False,
                  donated=frozenset()) -> Callable:
    """Compiles an ATen graph as AOTAutograd hands it over (inference, forward or backward):
    every placeholder an input, one executable per concrete signature, boxed arguments."""
    return _per_signature(lambda inputs: gm, free_layouts=free_layouts, donated=donated)


def _converts_as_exported(ep) -> bool:
    """True when every op of an exported program has a converter and none writes its inputs:
    then it converts as torch.export left it, without run_decompositions, which traces the whole
    model a second time (half of BERT-base's first call). A mutating op, or one only its
    decomposition covers, sends the program through the decompositions as before."""
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None or schema.is_mutable or not convertible(node):
            return False
    return True


def _compile_forward(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The training forward: its rank-4 outputs (the activations saved for the backward, mostly)
    may come back channels-last, which the backward then reads as they are."""
    return _compile_aten(gm, example_inputs, free_layouts=True)


def _compile_backward(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The training backward: the saved activations AOTAutograd marks as donated (used by
    nothing after the backward: torch frees them once it returns, as eager autograd does) are
    given up to the run, whose working set then reuses their memory as it finishes with each."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    donated = frozenset(getattr(meta, "bw_donated_idxs", None) or ())
    return _compile_aten(gm, example_inputs, donated=donated)


def _attr(gm: torch.nn.Module, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _training_backend():
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=_compile_forward, bw_compiler=_compile_backward, decompositions=decompositions())


def training_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A torch.compile backend that also trains: AOTAutograd splits the model into a forward and
    a backward ATen graph and tgraph compiles both, so loss.backward() runs tgraph's kernels;
    torch's optimizers update the parameters as usual. torch.compile(model,
    backend="tgraph_train", dynamic=False)."""
    # Attention as its math formulation while AOTAutograd traces: matmuls and a softmax, whose
    # gradients tgraph has, instead of a fused attention kernel whose backward only torch has.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        return _training_backend()(gm, example_inputs)


try:  # torch.compile(model, backend="tgraph") / backend="tgraph_train"
    from torch._dynamo import register_backend as _register_train
    _register_train(name="tgraph_train")(training_backend)
except Exception:  # noqa: S110  (see below)
    pass

try:  # torch.compile(model, backend="tgraph")
    from torch._dynamo import register_backend as _register
    _register(name="tgraph")(backend)
except Exception:  # an older or newer torch without this hook: the function still works
    pass
