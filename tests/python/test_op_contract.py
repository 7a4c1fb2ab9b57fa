"""Every op of the op list (src/ops/op_list.h) has a method on the Python Graph under its own
name (tests/cpp/op_contract_test.cpp checks the C++ side of the same contract;
docs/adding-an-op.md)."""
import tgraph as tg
from tgraph import _tgraph


def test_every_op_has_a_python_method():
    names = _tgraph.op_names()
    assert len(names) == len(set(names)) and len(names) > 100
    missing = [n for n in names if not hasattr(tg.Graph, n)]
    assert not missing, f"ops without a Python Graph method: {missing} (python/src/bind_graph.cpp)"
