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
    first, guards, symbols, env = {}, [], {}, None
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
                symbols[size.node.expr] = (k, d)
                env = size.node.shape_env
    code = _guard_code(env, symbols)
    if code is not None:
        guards.append(code)
    return guards


def _guard_code(env, symbols: dict):
    """The shape guards of torch's shape environment over the inputs' symbols as one Python
    expression: ("code", [[name, input, dim], ...], source), or None where there are none. The
    guards of a symbol's sign or 0/1 specialisation (`s0 >= 2`) are left to the ranges above,
    which relax that one; a guard torch's printer cannot write is left out (tgraph's own shape
    inference still refuses, with the op and the shapes, a size its graph cannot take)."""
    if env is None or not symbols:
        return None
    from torch.utils._sympy.printers import PythonPrinter
    printer, parts = PythonPrinter(), []
    for g in getattr(env, "guards", ()):
        e = g.expr
        if not e.free_symbols or not e.free_symbols <= set(symbols) or _bounds_one_symbol(e):
            continue
        try:
            src = printer.doprint(e)
            _check_source(src, {str(s) for s in symbols})
        except Exception:  # noqa: BLE001  (left out: see above)
            continue
        if src not in parts:
            parts.append(src)
    if not parts:
        return None
    names = [[str(s), k, d] for s, (k, d) in symbols.items()]
    return ("code", names, " and ".join(f"({p})" for p in parts))


def _bounds_one_symbol(e) -> bool:
    """A guard that only bounds one symbol by a number (`s0 >= 2`, `s1 <= 512`): the range
    constraints hold those, relaxed where they are export's default."""
    return len(e.free_symbols) == 1 and getattr(e, "is_Relational", False) and \
        any(a.is_Symbol for a in e.args) and any(a.is_Number for a in e.args)


# What a guard's source may use: arithmetic, comparisons and these functions, over the symbols.
_FUNCTIONS = {"ceil", "floor", "trunc", "sqrt", "log2", "min", "max", "abs", "int", "float", "round",
              "sym_min", "sym_max", "sym_float", "sym_int", "sym_sqrt", "sym_ite", "sym_not"}
_NODES = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.Name, ast.Constant,
          ast.Attribute, ast.Load, ast.IfExp, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.Add, ast.Sub,
          ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _check_source(src: str, symbols: set) -> ast.Expression:
    """The parsed source of a guard, refused (ValueError) unless it is arithmetic over the
    symbols and the functions above: the source is also read back from the compile cache's
    files, so nothing else is ever evaluated."""
    tree = ast.parse(src, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise ValueError(f"a guard uses {type(node).__name__}")
        if isinstance(node, ast.Name) and node.id not in symbols | _FUNCTIONS | {"math", "torch"}:
            raise ValueError(f"a guard names {node.id}")
        if isinstance(node, ast.Attribute) and (node.attr not in _FUNCTIONS or not isinstance(node.value, ast.Name)):
            raise ValueError(f"a guard reads .{node.attr}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, bool)):
            raise ValueError("a guard holds a non-number")
    return tree


def _guard_function(code):
    """The callable of a ("code", names, source) guard: the symbols' sizes in, True where every
    guard holds."""
    _, names, src = code
    symbols = [n[0] for n in names]
    _check_source(src, set(symbols))
    scope = {"__builtins__": {}, "math": math, "torch": torch, "bool": bool, "min": min, "max": max, "abs": abs,
             "int": int, "float": float, "round": round}
    return eval(f"lambda {', '.join(symbols)}: bool({src})", scope)  # noqa: S307  (checked above)


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
        elif g[0] == "code":
            fn = compiled.__dict__.get("_guard_fn")
            if fn is None:
                try:
                    fn = compiled._guard_fn = _guard_function(g)
                except (ValueError, SyntaxError, TypeError):  # (a cache file's guard that is no
                    return False                               #  arithmetic: that entry is not used)
            try:
                if not fn(*(shapes[k][d] for _, k, d in g[1])):
                    return False
            except (ArithmeticError, ValueError):  # (a guard dividing by a size of 0)
                return False
    return True
