"""Which sizes a symbolic executable of tgraph.torch takes: what torch.export assumed of the
input sizes it kept symbolic, checked against each new size before the executable runs it.

torch.export keeps a size symbolic and records, besides each symbol's range, every fact the
traced code relied on (its shape guards: a model that computes `2 * ceil(h8 / 2)` in Python and
bakes the 6 it found into a view holds only where that is 6; a derived size that is not 1).
The exported program is correct only where they hold, so an executable takes a size only where
they do, and a size where one fails is exported again (torch then traces the code's other
branch, or specialises what it must) instead of running a graph that does not fit it."""
from __future__ import annotations

import ast
import math

import torch

_DEFAULT_RANGE = (2, None)  # export's range of a symbol it knows nothing of (see size_guards)


def traced_dims(v) -> list:
    """A traced tensor's dims, -1 where torch keeps them symbolic."""
    return [-1 if isinstance(d, torch.SymInt) and not d.node.expr.is_Integer else int(d) for d in v.shape]


def size_guards(ep, user: list) -> list:
    """What torch.export assumed of the symbolic sizes, as checks of the inputs' dims: each
    symbol's range (a position table bounds a sequence), equal sizes where two inputs share a
    symbol, and the shape guards (_guard_code). [(kind, ...)] A symbol left at export's default
    range, [2, inf) (its 0/1 specialisation), takes 1 too, as the exported program's own module
    does: tgraph infers every op again at the concrete size, so broadcasting at 1 is numpy's. A
    range the code refined (a table's length, a size compared in the model) is checked whole."""
    ranges = {str(k): (v.lower, v.upper) for k, v in ep.range_constraints.items()}
    first, guards, dims, env = {}, [], {}, None  # dims: each distinct symbolic size -> (input, dim, example)
    traced = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    for k, name in enumerate(user):
        v = traced.get(name)
        for d, size in enumerate(v.shape if isinstance(v, torch.Tensor) else ()):
            if not isinstance(size, torch.SymInt) or size.node.expr.is_Integer:
                continue
            sym = str(size.node.expr)
            lo, hi = ranges.get(sym, (0, None))
            lo = int(lo) if lo is not None and str(lo) not in ("-int_oo", "-oo") else 0
            hi = int(hi) if hi is not None and str(hi) not in ("int_oo", "oo") else None
            if (lo, hi) == _DEFAULT_RANGE:
                lo = 1
            guards.append(("range", k, d, lo, hi))
            if sym in first:
                guards.append(("equal", k, d) + first[sym])
            else:
                first[sym] = (k, d)
                dims[size.node.expr] = (k, d, size.node.hint)
                env = size.node.shape_env
    code = _guard_code(env, dims)
    if code is not None:
        guards.append(code)
    return guards


def _guard_code(env, dims: dict):
    """The shape guards of torch's shape environment as one Python expression over the inputs'
    dims: ("code", [[name, input, dim], ...], source), or None where there are none. The
    variables are the symbols that are input dims themselves; an input dim that is an expression
    of them (an input of size 2n beside one of n) is a variable of its own, equal to that
    expression. The 0/1 specialisation (`s0 >= 2`, `s0 != 1`) is left to the ranges, which relax
    that one. A guard torch's printer cannot write (or over a symbol no input dim is) leaves the
    executable taking its example's sizes only: ("only", [[input, dim, size], ...])."""
    if env is None or not dims:
        return None
    from torch.utils._sympy.printers import PythonPrinter
    printer, parts, names = PythonPrinter(), [], []
    symbols = {e for e in dims if e.is_Symbol}
    try:
        for e, (k, d, _) in dims.items():
            if e.is_Symbol:
                names.append([str(e), k, d])
            elif e.free_symbols <= symbols:  # a derived input dim: a variable, equal to its expression
                names.append([f"_d{k}_{d}", k, d])
                parts.append(f"_d{k}_{d} == ({printer.doprint(e)})")
            else:
                raise ValueError(f"an input dim {e} over a symbol no input dim is")
        allowed = {n[0] for n in names}
        for src in parts:
            _check_source(src, allowed)
        fixed = dict(getattr(env, "replacements", {}))  # symbols torch fixed (a dim of 4 it specialised)
        for g in getattr(env, "guards", ()):
            e = g.expr.xreplace(fixed) if fixed else g.expr
            if not e.free_symbols or _specialises_zero_or_one(e):
                continue
            if not e.free_symbols <= symbols:
                raise ValueError(f"a guard over a symbol no input dim is: {e}")
            src = printer.doprint(e)
            _check_source(src, allowed)
            if src not in parts:
                parts.append(src)
    except Exception:  # noqa: BLE001  (an unwritable guard: the example's sizes only)
        return ("only", [[k, d, int(hint)] for k, d, hint in dims.values() if hint is not None])
    if not parts:
        return None
    return ("code", names, " and ".join(f"({p})" for p in parts))


def _specialises_zero_or_one(e) -> bool:
    """`s >= 2`, `s > 1`, `s != 0`, `s != 1` (and `s >= 0`, `s > 0`, `s >= 1`): export's
    assumption that a symbolic size is neither 0 nor 1, which the ranges relax (size_guards)."""
    import sympy
    if len(e.free_symbols) != 1 or len(e.args) != 2:
        return False
    lhs, rhs = e.args
    if not (lhs.is_Symbol and rhs.is_Number) and not (rhs.is_Symbol and lhs.is_Number):
        return False
    sym_left = lhs.is_Symbol
    n = int(rhs if sym_left else lhs)
    if isinstance(e, sympy.Ne):
        return n in (0, 1)
    lower = (isinstance(e, sympy.GreaterThan) and sym_left) or (isinstance(e, sympy.LessThan) and not sym_left)
    strict = (isinstance(e, sympy.StrictGreaterThan) and sym_left) or (isinstance(e, sympy.StrictLessThan) and not sym_left)
    return (lower and n <= 2) or (strict and n <= 1)


# What a guard's source may use: arithmetic, comparisons and these functions, over the variables
# (_guard_code). The same names make the scope it is evaluated in (_guard_function).
_BARE = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round, "bool": bool}
_MATH = {"ceil", "floor", "trunc", "sqrt", "log2"}
_TORCH = {"sym_min", "sym_max", "sym_float", "sym_int", "sym_sqrt", "sym_ite", "sym_not"}
_ATTRIBUTES = {("math", f) for f in _MATH} | {("torch", f) for f in _TORCH}
_NODES = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.Name, ast.Constant,
          ast.Attribute, ast.Load, ast.IfExp, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.Add, ast.Sub,
          ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _check_source(src: str, variables: set) -> ast.Expression:
    """The parsed source of a guard, refused (ValueError) unless it is arithmetic over the
    variables and the functions above, powers by small whole numbers: the source is also read
    back from the compile cache's files, so nothing else is ever evaluated."""
    tree = ast.parse(src, mode="eval")
    names = set(variables) | set(_BARE) | {"math", "torch"}
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise ValueError(f"a guard uses {type(node).__name__}")
        if isinstance(node, ast.Name) and node.id not in names:
            raise ValueError(f"a guard names {node.id}")
        if isinstance(node, ast.Attribute) and not (
                isinstance(node.value, ast.Name) and (node.value.id, node.attr) in _ATTRIBUTES):
            raise ValueError(f"a guard reads .{node.attr}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (bool, int, float)):
            raise ValueError("a guard holds a non-number")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and not (
                isinstance(node.right, ast.Constant) and isinstance(node.right.value, (int, float))
                and abs(node.right.value) <= 64):
            raise ValueError("a guard raises to a power that is not a small number")
    return tree


def _guard_function(code):
    """The callable of a ("code", names, source) guard: the variables' sizes in, True where
    every guard holds."""
    _, names, src = code
    variables = [n[0] for n in names]
    if not all(isinstance(v, str) and v.isidentifier() for v in variables):
        raise ValueError("a guard's variables are not names")
    _check_source(src, set(variables))
    scope = {"__builtins__": {}, "math": math, "torch": torch, **_BARE}
    return eval(f"lambda {', '.join(variables)}: bool({src})", scope)  # noqa: S307  (checked above)


def accepts(compiled, tensors: list) -> bool:
    """Whether a symbolic executable takes these tensors: every dim it fixed has their size and
    the sizes it left free are within what torch.export assumed (size_guards); otherwise the
    module exports again for them (and torch itself says why a size cannot be taken). Called at
    every call: the answer is kept per set of sizes."""
    shapes = tuple(tuple(t.shape) for t in tensors)
    memo = compiled.__dict__.setdefault("_accepted", {})
    hit = memo.get(shapes)
    if hit is None:
        if len(memo) > 4096:  # (bounded: a stream of ever new sizes)
            memo.clear()
        hit = memo[shapes] = _accepts(compiled, shapes)
    return hit


def _accepts(compiled, shapes: tuple) -> bool:
    types = compiled.exe.input_types
    if not all(len(t.shape) == len(s) and all(d < 0 or d == n for d, n in zip(t.shape, s))
               for t, s in zip(types, shapes)):
        return False
    for g in getattr(compiled, "guards", ()):
        if g[0] == "range":
            n = shapes[g[1]][g[2]]
            if n < g[3] or (g[4] is not None and n > g[4]):
                return False
        elif g[0] == "equal":
            if shapes[g[1]][g[2]] != shapes[g[3]][g[4]]:
                return False
        elif g[0] == "only":
            if any(shapes[k][d] != n for k, d, n in g[1]):
                return False
        elif g[0] == "code":
            try:  # (a cache file's guard that is no arithmetic, one dividing by a size of 0: not taken)
                fn = compiled.__dict__.get("_guard_fn") or _guard_function(g)
                compiled._guard_fn = fn
                if not fn(*(shapes[k][d] for _, k, d in g[1])):
                    return False
            except Exception:  # noqa: BLE001
                return False
        else:
            return False  # (a kind this version does not know, from a cache file)
    return True
