"""tgraph.torch.compile's disk cache (issue 22): a model seen before starts from its cached
executable, without torch.export; changed weights or code miss; two processes writing one
entry at once leave a whole entry; a broken entry is rebuilt."""
import math
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
import tgraph.torch as tgt  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TGRAPH_NO_COMPILE_CACHE", raising=False)
    return tmp_path / "torch"


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3)).eval()


def counts():
    s = tgt.stats()
    return s["executables"], s["cache_hits"]


def test_second_compile_comes_from_the_cache(cache):
    x = torch.randn(4, 6)
    model = make_model()
    with torch.no_grad():
        want = model(x)
        e0, h0 = counts()
        torch.testing.assert_close(tgt.compile(model)(x), want)
        assert counts() == (e0 + 1, h0)  # compiled, and stored
        tgt._torch_cache.wait()
        assert len(list(cache.glob("*.tgx"))) == 1 and len(list(cache.glob("*.json"))) == 1
        torch.testing.assert_close(tgt.compile(make_model())(x), want)  # same code and weights
        assert counts() == (e0 + 1, h0 + 1)
        other = make_model(seed=1)  # other weights: another entry
        torch.testing.assert_close(tgt.compile(other)(x), other(x))
        assert counts() == (e0 + 2, h0 + 1)
        tgt.compile(model)(torch.randn(5, 6))  # another input size: another entry
        assert counts() == (e0 + 3, h0 + 1)
        model.train()  # another mode: another entry
        tgt.compile(model)(x)
        assert counts() == (e0 + 4, h0 + 1)


def test_a_broken_entry_is_rebuilt(cache):
    x = torch.randn(2, 6)
    model = make_model()
    with torch.no_grad():
        tgt.compile(model)(x)
        tgt._torch_cache.wait()
        (tgx,) = cache.glob("*.tgx")
        tgx.write_bytes(tgx.read_bytes()[: tgx.stat().st_size // 2])  # truncated
        e0, h0 = counts()
        torch.testing.assert_close(tgt.compile(model)(x), model(x))
        assert counts() == (e0 + 1, h0)
        torch.testing.assert_close(tgt.compile(model)(x), model(x))
        assert counts() == (e0 + 1, h0 + 1)


def test_two_processes_writing_one_entry(cache):
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_torch_cache import make_model
        import tgraph.torch as tgt
        x = torch.randn(3, 6, generator=torch.Generator().manual_seed(7))
        m = make_model()
        with torch.no_grad():
            torch.testing.assert_close(tgt.compile(m)(x), m(x))
        print(tgt.stats()["executables"] + tgt.stats()["cache_hits"])
    """)
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        assert out.strip().endswith("1")
    assert len(list(cache.glob("*.tgx"))) == 1 and len(list(cache.glob("*.json"))) == 1
    assert not list(cache.glob("*.tmp"))
    e0, h0 = counts()
    with torch.no_grad():
        tgt.compile(make_model())(torch.randn(3, 6))
    assert counts() == (e0, h0 + 1)  # the entry they left loads


def test_size_bound_drops_the_least_recently_used(cache, monkeypatch):
    monkeypatch.setenv("TGRAPH_COMPILE_CACHE_MB", "0")  # nothing fits: each new entry evicts the rest
    with torch.no_grad():
        for n in (2, 3):
            tgt.compile(make_model())(torch.randn(n, 6))
    assert len(list(cache.glob("*.json"))) <= 1


def test_the_entry_is_written_while_the_caller_goes_on(cache, monkeypatch):
    """The first call returns its result before its entry is on disk (a thread writes it); a
    lookup of the same key in this process waits for it and finds it whole."""
    import threading
    release, plain = threading.Event(), tgt._torch_cache.store

    def slow_store(*args):
        release.wait(60)
        plain(*args)
    monkeypatch.setattr(tgt._torch_cache, "store", slow_store)
    x = torch.randn(4, 6)
    model = make_model(seed=3)
    with torch.no_grad():
        torch.testing.assert_close(tgt.compile(model)(x), model(x))
        assert not list(cache.glob("*.tgx"))  # still being written
        release.set()
        e0, h0 = counts()
        torch.testing.assert_close(tgt.compile(make_model(seed=3))(x), model(x))
        assert counts() == (e0, h0 + 1)  # waited for the entry, then loaded it


class AdaptiveMaxOverADynamicDim(nn.Module):
    """Adaptive max pooling over the dynamic dim (taps per window that depend on the size, which
    tgraph does not compute in the graph): dynamic=True falls back to one executable per size."""

    def forward(self, x):
        return nn.functional.adaptive_max_pool1d(x.T[None], 2)


def test_a_per_size_fallback_is_cached_per_size(cache, monkeypatch):
    """Where dynamic=True could not keep the sizes, each size's executable is an entry of its
    own: a later compile at another size does not take one made for the first (it ran it on
    the wrong size and failed), and the same size comes back from the cache."""
    monkeypatch.setattr(tgt, "_REPORTED", set())  # (its once-per-process line stays for other tests)
    model = AdaptiveMaxOverADynamicDim()
    with torch.no_grad():
        e0, h0 = counts()
        x4 = torch.randn(4, 3)
        torch.testing.assert_close(tgt.compile(model, dynamic=True)(x4), model(x4))
        tgt._torch_cache.wait()
        x6 = torch.randn(6, 3)
        torch.testing.assert_close(tgt.compile(model, dynamic=True)(x6), model(x6))
        assert counts() == (e0 + 2, h0)  # compiled for 6, not taken from 4's entry
        tgt._torch_cache.wait()
        torch.testing.assert_close(tgt.compile(model, dynamic=True)(x4), model(x4))
        assert counts() == (e0 + 2, h0 + 1)


class SizeMathInPython(nn.Module):
    """k = int(ceil(n / 2)) is a plain number in the trace, held by a shape guard of torch's."""

    def forward(self, x):
        k = int(math.ceil(x.shape[0] / 2))
        return nn.functional.pad(x, (0, 0, 0, 2 * k - x.shape[0])).reshape(k, 8) * 2


def test_a_cached_dynamic_entry_keeps_torchs_shape_guards(cache):
    """The guards torch.export recorded come back with a cached symbolic executable: loaded for
    n = 5 (the k of 6, which stored it), not for 8 (another k), which compiles its own."""
    model = SizeMathInPython()
    with torch.no_grad():
        e0, h0 = counts()
        x6 = torch.randn(6, 4)
        torch.testing.assert_close(tgt.compile(model, dynamic=True)(x6), model(x6))
        tgt._torch_cache.wait()
        x5 = torch.randn(5, 4)
        torch.testing.assert_close(tgt.compile(model, dynamic=True)(x5), model(x5))
        assert counts() == (e0 + 1, h0 + 1)
        x8 = torch.randn(8, 4)
        torch.testing.assert_close(tgt.compile(model, dynamic=True)(x8), model(x8))
        assert counts()[0] == e0 + 2


def test_a_cached_guard_that_is_not_arithmetic_is_never_run(cache, tmp_path):
    """A cache file's guard is read back as Python source: one that is anything but arithmetic
    over the sizes (here a call that would write a file) leaves that entry unused."""
    import json
    model = SizeMathInPython()
    x6 = torch.randn(6, 4)
    with torch.no_grad():
        tgt.compile(model, dynamic=True)(x6)
        tgt._torch_cache.wait()
        marker = tmp_path / "ran"
        for meta in cache.glob("*.json"):
            m = json.loads(meta.read_text())
            for g in m.get("guards", []):
                if g[0] == "code":
                    g[2] = f"open({str(marker)!r}, 'w') or True"
            meta.write_text(json.dumps(m))
        e0, h0 = counts()
        torch.testing.assert_close(tgt.compile(model, dynamic=True)(x6), model(x6))
        assert counts() == (e0 + 1, h0) and not marker.exists()


def test_device_weights_hash_where_they_are():
    """The reduction that keys GPU weights without copying them (run here on CPU tensors, the
    same torch code): equal bytes give equal rows, one flipped bit or two swapped words differ,
    and a padded tail does not hide a trailing difference."""
    from tgraph._torch_cache import _device_rows
    g = torch.Generator().manual_seed(5)
    for shape, dtype in (((768,), torch.float32), ((3, 1000), torch.float16), ((5000,), torch.int64)):
        t = torch.randint(-1000, 1000, shape, generator=g).to(dtype)
        same = _device_rows(t.clone())
        assert torch.equal(_device_rows(t), same)
        flipped = t.clone().view(-1)
        flipped.view(torch.uint8)[-1] ^= 1  # the last byte: in the padded block
        assert not torch.equal(_device_rows(flipped.view(shape)), same)
        swapped = t.clone().view(-1)
        swapped[[0, 1]] = swapped[[1, 0]]
        if not torch.equal(swapped, t.view(-1)):
            assert not torch.equal(_device_rows(swapped.view(shape)), same)
