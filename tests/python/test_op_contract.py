"""Every op of the op list (src/ops/op_list.h) has a method on the Python Graph, under its own
name or one listed here with the reason (tests/cpp/op_contract_test.cpp checks the C++ side of
the same contract; docs/adding-an-op.md)."""
import tgraph as tg
from tgraph import _tgraph

# Ops reached from Python under another name or through another method, and why (none now).
ELSEWHERE: dict[str, str] = {}


def test_every_op_has_a_python_method():
    names = _tgraph.op_names()
    assert len(names) == len(set(names)) and len(names) > 100
    missing = [n for n in names if not hasattr(tg.Graph, n) and n not in ELSEWHERE]
    assert not missing, f"ops without a Python Graph method: {missing} (python/src/bind_graph.cpp)"


def test_the_exceptions_are_still_ops():
    names = set(_tgraph.op_names())
    assert set(ELSEWHERE) <= names, set(ELSEWHERE) - names
