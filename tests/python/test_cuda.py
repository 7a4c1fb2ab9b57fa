"""The CUDA backend from Python (skipped without a usable GPU): results against the CPU, and
zero-copy exchange with PyTorch's CUDA tensors."""
import numpy as np
import pytest

import tgraph as tg

pytestmark = pytest.mark.skipif(tg.Device.cuda_device_count() == 0, reason="no CUDA device")


def build(g):
    x = g.placeholder([-1, 64], tg.f32, "x")
    w = g.constant(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32) * 0.1)
    y = g.softmax(g.gelu_tanh(x @ w) * 2 + 1, -1)
    return x, y


def test_gpu_matches_cpu(rng):
    g = tg.Graph()
    x, y = build(g)
    gpu = g.compile([x], [y], device="cuda")
    cpu = g.compile([x], [y], device="cpu")
    assert gpu.device == tg.Device.cuda(0)
    for n in (3, 100):
        a = rng.standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(gpu.run([a])[0], cpu.run([a])[0], rtol=1e-5, atol=1e-6)


def test_bf16_autocast_close_to_f32(rng):
    g = tg.Graph()
    x, y = build(g)
    a = rng.standard_normal((16, 64)).astype(np.float32)
    ref = g.compile([x], [y], device="cpu").run([a])[0]
    got = g.compile([x], [y], device="cuda", precision="bf16").run([a])[0]
    np.testing.assert_allclose(got, ref, rtol=3e-2, atol=3e-3)


def test_device_tensors_stay_on_the_gpu(rng):
    g = tg.Graph()
    x = g.placeholder([8, 8], tg.f32, "x")
    exe = g.compile([x], [x * 2 + 1], device="cuda")
    a = rng.standard_normal((8, 8)).astype(np.float32)
    t = tg.DeviceTensor(a, tg.Device.cuda(0))
    for _ in range(3):  # chained runs: no host round trip in between
        (t,) = exe.run_device([t])
    assert t.device == tg.Device.cuda(0)
    np.testing.assert_allclose(t.numpy(), ((a * 2 + 1) * 2 + 1) * 2 + 1, rtol=1e-6)


def test_torch_cuda_tensors_zero_copy(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    a = torch.randn(32, 64, device="cuda")
    g = tg.Graph()
    x = g.placeholder([32, 64], tg.f32, "x")
    exe = g.compile([x], [g.relu(x) * 3], device="cuda")
    t = tg.from_dlpack(a)
    assert t.device == tg.Device.cuda(0)
    (out,) = exe.run_device([t])
    y = torch.from_dlpack(out)
    assert y.is_cuda
    torch.testing.assert_close(y, torch.relu(a) * 3)


def test_torch_frontend_on_cuda_tensors(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    import tgraph.torch as tgt
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4)).cuda().eval()
    x = torch.randn(4, 3, 16, 16, device="cuda")
    fast = tgt.compile(model)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # the reference in true fp32, as tgraph's default
    try:
        with torch.no_grad():
            got, want = fast(x), model(x)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    assert got.is_cuda and got.device == x.device
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_training_backend_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    import copy
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 8 * 8, 5)).cuda()
    eager = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="tgraph_train", dynamic=False)
    x = torch.randn(16, 3, 16, 16, device="cuda")
    y = torch.randint(0, 5, (16,), device="cuda")
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        torch.nn.functional.cross_entropy(compiled(x), y).backward()
        torch.nn.functional.cross_entropy(eager(x), y).backward()
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5)
    for b1, b2 in zip(model.buffers(), eager.buffers()):
        torch.testing.assert_close(b1, b2, rtol=1e-4, atol=1e-5)


def test_training_steps_on_cuda_match_eager(monkeypatch):
    """Several steps through "tgraph_train" on the GPU: stream-ordered runs, the forward's
    activations handed to the backward channels-last and in place (lent outputs), the
    backward's buffers in the activations it is done with (donated), the same losses and
    weights as eager."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    import copy
    import tgraph.torch as tt
    nn = torch.nn
    made = []
    init = tt._Compiled.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)
    monkeypatch.setattr(tt._Compiled, "__init__", record)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.bn = nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32)
            self.c1, self.b1 = nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = nn.functional.max_pool2d(torch.relu(self.bn(self.stem(x))), 2)
            x = torch.relu(self.b1(self.c1(x)) + x)
            return self.fc(x.mean((2, 3)))

    torch.manual_seed(0)
    model = Net().cuda()
    eager = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="tgraph_train", dynamic=False)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        losses = {}
        for name, m, run in (("tgraph", model, compiled), ("eager", eager, eager)):
            opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
            gen = torch.Generator(device="cuda").manual_seed(1)
            losses[name] = []
            for _ in range(4):  # activations of 32 x 64 x 64 x 32 f32: 16 MiB, lent
                x = torch.randn(32, 3, 64, 64, device="cuda", generator=gen)
                y = torch.randint(0, 10, (32,), device="cuda", generator=gen)
                loss = torch.nn.functional.cross_entropy(run(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses[name].append(float(loss))
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    np.testing.assert_allclose(losses["tgraph"], losses["eager"], rtol=1e-3)
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)
    backward = [c for c in made if c.donate]
    assert len(backward) == 1, [len(c.donate) for c in made]
    stats = backward[0].exe.run_stats
    assert stats["replays"] >= 2 and stats["buffers_in_donated"] > 0, stats


def test_outputs_held_across_calls_keep_their_values():
    """Large outputs of a stream-ordered run are the captured graph's own buffers (lent): a
    caller that keeps them while calling again gets a second graph instance, and with both
    held, an op-by-op run; no output ever changes under its holder."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    import tgraph.torch as tgt
    torch.manual_seed(0)
    conv = torch.nn.Sequential(torch.nn.Conv2d(4, 64, 3, padding=1), torch.nn.ReLU()).cuda().eval()
    fast = tgt.compile(conv)
    xs = [torch.randn(8, 4, 32, 32, device="cuda") for _ in range(5)]  # outputs: 2 MiB each
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # the reference in true f32, as tgraph's default
    try:
        with torch.no_grad():
            want = [conv(x) for x in xs]
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    with torch.no_grad():
        held = [fast(x) for x in xs]  # every output kept: 2 instances, then op by op
        again = [fast(x) for x in xs]  # and the same again, the earlier ones still held
    for w, h, a in zip(want, held, again):
        torch.testing.assert_close(h, w, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        for x, w in zip(xs, want):  # one at a time, released: the first instance replays
            torch.testing.assert_close(fast(x), w, rtol=1e-4, atol=1e-5)


def test_device_memory_counts_pool_and_captured_graphs():
    """Device.memory(): tgraph's bytes in use and their peak, graph memory included (a captured
    run's intermediates live there); reset_peak_memory starts over from what is in use."""
    dev = tg.Device.cuda(0)
    g = tg.Graph()
    x = g.placeholder([4096, 4096], tg.f32, "x")
    y = g.reduce_sum(g.exp(x) * 2.0 + g.sin(x), [0, 1])  # 64 MiB input; intermediates fused or not
    exe = g.compile([x], [y], device="cuda")
    xv = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
    dev.reset_peak_memory()
    for _ in range(3):  # the first run goes op by op, then the capture, then a replay
        exe.run([xv])
    in_use, peak = dev.memory()
    assert peak >= 64 << 20  # at least the input's device copy
    assert peak >= in_use
    dev.reset_peak_memory()
    in_use2, peak2 = dev.memory()
    assert peak2 == in_use2 <= peak
    assert tg.Device.cpu().memory() == (0, 0)


def test_stream_ordered_inputs_read_in_place_follow_their_memory():
    """A stream-ordered run reads the caller's tensors in place once they stay put (a model's
    parameters): an in-place update between calls is seen, an input at a new address still
    gives the right result (the graph is captured again, copying that input), and an output
    that is an input is a copy, not the caller's memory."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    g = tg.Graph()
    x = g.placeholder([512, 1024], tg.f32, "x")
    w = g.placeholder([512, 1024], tg.f32, "w")
    exe = g.compile([x, w], [x * w + 1.0, w], device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    gen = torch.Generator(device="cuda").manual_seed(0)
    xt = torch.randn(512, 1024, device="cuda", generator=gen)
    wt = torch.randn(512, 1024, device="cuda", generator=gen)

    def run(a, b):
        caps = [tg.from_dlpack(torch.utils.dlpack.to_dlpack(t)) for t in (a, b)]
        return [torch.utils.dlpack.from_dlpack(o.__dlpack__(stream=-1)) for o in exe.run_device(caps, stream=stream)]

    for step in range(6):
        y, w_out = run(xt, wt)
        torch.testing.assert_close(y, xt * wt + 1.0)
        torch.testing.assert_close(w_out, wt)
        assert w_out.data_ptr() != wt.data_ptr()
        wt.mul_(0.5).add_(0.25)  # in place, as an optimizer updates a parameter
        if step == 3:
            xt = torch.randn(512, 1024, device="cuda", generator=gen)  # a new batch elsewhere
        del y, w_out
    s = exe.run_stats
    assert s["replays"] >= 3 and s["captures"] <= 3, s
    assert s["uncaptured"] <= 2, s
    # the captured graph's memory: at least its [512, 1024] f32 output, never more used than held
    assert 512 * 1024 * 4 <= s["graph_live_peak"] <= s["graph_bytes"], s


def test_small_outputs_share_one_copy():
    """Outputs too small to lend (under 1 MiB) come back through one allocation and one copy
    kernel (launch_copy_many): every one with its own values, dtype and odd byte count, each
    living on when the others are dropped, on every call (the op-by-op run, the capture's
    replays)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    g = tg.Graph()
    x = g.placeholder([7, 13], tg.f32, "x")
    outs = [x * 2.0, g.cast(x * 3.0, tg.f16), g.reduce_sum(x, [1]), g.cast(g.greater(x, g.scalar(0.0)), tg.i32),
            g.exp(x) + 1.0, g.cast(x, tg.bf16), g.reduce_max(x, [0, 1])]
    exe = g.compile([x], outs, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    gen = torch.Generator(device="cuda").manual_seed(3)
    for step in range(4):
        xt = torch.randn(7, 13, device="cuda", generator=gen)
        caps = [tg.from_dlpack(torch.utils.dlpack.to_dlpack(xt))]
        got = [torch.utils.dlpack.from_dlpack(o.__dlpack__(stream=-1)) for o in exe.run_device(caps, stream=stream)]
        want = [xt * 2.0, (xt * 3.0).half(), xt.sum(1), (xt > 0).int(), xt.exp() + 1.0, xt.bfloat16(), xt.max()]
        for i, (a, b) in enumerate(zip(got, want)):
            assert a.dtype == b.dtype, (step, i)
            torch.testing.assert_close(a.float(), b.float(), rtol=1e-3, atol=1e-3, msg=f"step {step} output {i}")
        keep = got[2]
        del got
        torch.testing.assert_close(keep, xt.sum(1), rtol=1e-5, atol=1e-5)  # still its own values


def test_first_run_hands_over_its_own_outputs():
    """A stream-ordered caller's first (uncaptured) run reads its device inputs in place and
    hands over the outputs it computed in its own pool memory without copying them: a training
    backward's first run had cloned every saved activation (bench/RESULTS.md, session 16). An
    output that is an input, or the same buffer twice, is still a copy of its own."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    dev = tg.Device.cuda(0)
    mib = 1 << 20
    g = tg.Graph()
    x = g.placeholder([1024, 1024], tg.f32, "x")  # 4 MiB
    y = g.exp(x) * 2.0
    exe = g.compile([x], [y, g.sin(x) + 1.0, x, y], device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    xt = torch.randn(1024, 1024, device="cuda", generator=torch.Generator(device="cuda").manual_seed(5))
    torch.cuda.synchronize()
    dev.reset_peak_memory()
    base = dev.memory()[0]
    caps = [tg.from_dlpack(torch.utils.dlpack.to_dlpack(xt))]
    got = [torch.utils.dlpack.from_dlpack(o.__dlpack__(stream=-1)) for o in exe.run_device(caps, stream=stream)]
    torch.cuda.synchronize()
    peak = dev.memory()[1] - base
    # y and sin(x)+1 where computed, the copies of x and of y's second appearance: 16 MiB, and
    # the executable's own first 2 MiB chunk (index-error flags). Cloning the input and copying
    # every output had been 4 + 8 + 16 = 28 MiB.
    assert peak <= 22 * mib, peak / mib
    want = [xt.exp() * 2.0, xt.sin() + 1.0, xt.clone(), xt.exp() * 2.0]
    ptrs = [t.data_ptr() for t in got]
    assert len(set(ptrs)) == 4 and xt.data_ptr() not in ptrs
    xt.add_(100.0)  # the caller's input changes: the outputs do not
    got[0].mul_(0.0)  # nor does one output through another
    torch.cuda.synchronize()
    for i in (1, 2, 3):
        torch.testing.assert_close(got[i], want[i], rtol=1e-5, atol=1e-5, msg=f"output {i}")


_LOAD_AND_RUN = r"""
import json, sys
import numpy as np
import tgraph as tg
exe = tg.Executable.load(sys.argv[1])
a = np.load(sys.argv[2])
y = exe.run([a])[0]
np.save(sys.argv[3], y)
print(json.dumps(exe.run_stats))
"""


def test_saved_executable_runs_in_a_fresh_process_without_compiling(rng, tmp_path):
    """Executable.save writes the generated kernels its runs used (cubins); a fresh process with
    an empty kernel cache loads the file and runs it without NVRTC compiling anything."""
    import json
    import os
    import subprocess
    import sys
    g = tg.Graph()
    x, y = build(g)
    z = g.reduce_sum(y * y + 0.5, [1])  # a reduction beside the fused elementwise kernels
    exe = g.compile([x], [y, z], device="cuda")
    a = rng.standard_normal((37, 64)).astype(np.float32)
    want = exe.run([a])[0]
    path = tmp_path / "model.tgx"
    exe.save(str(path))
    np.save(tmp_path / "a.npy", a)
    env = dict(os.environ, TGRAPH_CACHE_DIR=str(tmp_path / "empty-cache"))
    out = subprocess.run([sys.executable, "-c", _LOAD_AND_RUN, str(path), str(tmp_path / "a.npy"),
                          str(tmp_path / "y.npy")], env=env, capture_output=True, text=True, check=True)
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert stats["kernels_compiled"] == 0, (stats, out.stderr)
    assert stats["kernels_from_file"] >= 2, stats
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)
    assert not (tmp_path / "empty-cache").exists() or not any((tmp_path / "empty-cache").iterdir())


def test_saved_executable_carries_its_library_choices(rng, tmp_path):
    """Executable.save writes the library choices its runs made (here cuBLASLt's algorithms) under
    this process's library signature; a fresh process hands them to the libraries and computes
    the same values."""
    import os
    import subprocess
    import sys
    g = tg.Graph()
    x = g.placeholder([2, 4, 64, 64], tg.f16, "x")
    w = g.constant((rng.standard_normal((64, 64)) * 0.1).astype(np.float16))
    q = x @ w
    y = g.scaled_dot_product_attention(q, x, x)
    # cuDNN's attention from the first run (not tgraph's kernel standing in while the plan
    # builds: its last bits differ from cuDNN's, and the loaded run must match exactly).
    exe = g.compile([x], [y], device="cuda", switches={"TGRAPH_NO_INTERIM_ATTENTION": 1})
    a = rng.standard_normal((2, 4, 64, 64)).astype(np.float16)
    want = exe.run([a])[0]
    path = tmp_path / "attention.tgx"
    exe.save(str(path))
    data = path.read_bytes()
    assert b"|lt|" in data
    np.save(tmp_path / "a.npy", a)
    env = dict(os.environ, TGRAPH_CACHE_DIR=str(tmp_path / "empty-cache"))
    subprocess.run([sys.executable, "-c", _LOAD_AND_RUN, str(path), str(tmp_path / "a.npy"), str(tmp_path / "y.npy")],
                   env=env, capture_output=True, text=True, check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)


def test_empty_inputs_run_in_tgraph_on_the_gpu(monkeypatch):
    """A signature with a zero-size CUDA input (a detector's boxes when nothing was found) runs
    in tgraph, strictly (nothing left to torch): the nodes with no elements to compute are
    skipped, reductions of nothing still give their identities, and sizes alternate."""
    torch = pytest.importorskip("torch")
    import tgraph.torch as tgt
    monkeypatch.setenv("TGRAPH_TORCH_STRICT", "1")

    class Boxes(torch.nn.Module):
        def forward(self, boxes, scores, feats):
            b = boxes * 2 + 1
            area = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(1)
            head = torch.nn.functional.linear(feats.flatten(1), torch.ones(5, 12, device=feats.device))
            return b.sum(0), torch.cat([b, boxes]), area, scores.topk(min(2, scores.numel()))[0], head.relu()

    model = Boxes()
    fast = tgt.compile(model)
    for n in (0, 3, 0):
        args = (torch.rand(n, 4, device="cuda"), torch.rand(n, device="cuda"), torch.rand(n, 3, 2, 2, device="cuda"))
        for got, want in zip(fast(*args), model(*args)):
            assert got.device.type == "cuda"
            torch.testing.assert_close(got, want)


# Fused attention in a process that imported PyTorch first, as tgraph.torch's users do: cuDNN is
# then the one torch's wheel brings (9.19 on the H200 machine, whose system cuDNN is 9.14). There,
# plans that shared compiled kernels between shapes computed garbage (a longer sequence after a
# short one; 16 x 128 after 2 x 128) while the C++ GPU tests, on the system's cuDNN, passed: with
# TGRAPH_ATTENTION_SHARED_KERNELS=1 this test fails there (session 31). One executable with
# dynamic batch and lengths, the first call short, then other batches and lengths, each against
# float64. argv: masked (1 / 0), then "save PATH" (save the executable after its runs) or "load
# PATH" (run a saved one).
_ATTENTION_SIZES = r"""
import sys
import torch  # noqa: F401  (first: its cuDNN is the process's)
import numpy as np
import tgraph as tg
masked = sys.argv[1] == "1"
mode, path = sys.argv[2], sys.argv[3]
if mode == "load":
    e = tg.Executable.load(path)
else:
    g = tg.Graph()
    q, k, v = (g.placeholder([-1, 12, -1, 64], tg.f16, n) for n in "qkv")
    m = g.placeholder([-1, 1, 1, -1], tg.f16, "m") if masked else None
    e = g.compile([q, k, v] + ([m] if masked else []), [g.scaled_dot_product_attention(q, k, v, m)], device="cuda")
rng = np.random.default_rng(7)
worst = 0.0
for b, L in [(16, 16), (1, 16), (4, 16), (16, 32), (2, 128), (16, 128), (1, 512), (3, 40)]:
    a = [rng.standard_normal((b, 12, L, 64)).astype(np.float16) for _ in range(3)]
    bias = np.zeros((b, 1, 1, L), np.float16)
    for i in range(b):
        bias[i, 0, 0, max(1, L - 3 * i):] = -10000
    got = e.run(a + ([bias] if masked else []))[0].astype(np.float64)
    qq, kk, vv = (x.astype(np.float64) for x in a)
    s = qq @ kk.transpose(0, 1, 3, 2) / 8.0 + (bias.astype(np.float64) if masked else 0)
    p = np.exp(s - s.max(-1, keepdims=True))
    err = float(np.abs(got - (p / p.sum(-1, keepdims=True)) @ vv).max())
    print(f"{b}x{L}: {err:.3g}")
    worst = max(worst, err)
if mode == "save":
    e.save(path)
print("worst", worst)
"""


# The same sizes three times: building cuDNN's plans (and writing them to an empty compile
# cache), reading them back from that cache in a second process, and from the saved executable's
# file in a third whose cache is empty again. Read-back plans must compute as the built ones.
@pytest.mark.parametrize("masked", [False, True])
def test_attention_at_several_sizes_in_a_torch_process(masked, tmp_path):
    pytest.importorskip("torch")
    import os
    import re
    import subprocess
    import sys
    exe = str(tmp_path / "attention.tgx")
    for step, mode, cache, read_from in [("built", "save", "c1", None), ("disk cache", "run", "c1", "the disk cache"),
                                         ("file", "load", "c2", "an executable's file")]:
        env = dict(os.environ, TGRAPH_CACHE_DIR=str(tmp_path / cache), TGRAPH_PROFILE="first")
        out = subprocess.run([sys.executable, "-c", _ATTENTION_SIZES, "1" if masked else "0", mode, exe],
                             capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        found = re.search(r"^worst (\S+)", out.stdout, re.M)
        assert found, out.stdout
        assert float(found.group(1)) < 1e-2, (step, out.stdout)
        built = len(re.findall(r"cudnn attention plan built", out.stderr))
        if read_from is None:
            assert built > 0, out.stderr[-3000:]
        else:
            assert "cudnn attention plan read from " + read_from in out.stderr, (step, out.stderr[-3000:])
            assert built == 0, (step, out.stderr[-3000:])


# A convolution and a matmul whose library choices (cuDNN's algorithm, cuBLASLt's) a first
# process asks the heuristics for and files in the compile cache; a second process with the same
# cache takes them from there (no heuristics asked) and computes the same result. The sizes are
# this test's own, so no other test's choices are in the cache. Prints the result's checksum.
_LIBRARY_CHOICES = r"""
import numpy as np
import tgraph as tg
rng = np.random.default_rng(3)
a = rng.standard_normal((3, 19, 23, 5)).astype(np.float32)
k = rng.standard_normal((3, 3, 5, 11)).astype(np.float32) * 0.2
m = rng.standard_normal((11, 13)).astype(np.float32) * 0.3
g = tg.Graph()
x = g.placeholder(a.shape, tg.f32, "x")
y = g.conv2d(x, g.constant(k), tg.ConvDesc(stride=[1, 1], explicit_padding=[1, 1, 1, 1])) @ g.constant(m)
got = g.compile([x], [y], device="cuda").run([a])[0]
want = g.compile([x], [y], device="cpu").run([a])[0]
print("max diff", float(np.abs(got - want).max()))
"""


def test_library_choices_come_from_the_disk_cache_in_a_second_process(tmp_path):
    import os
    import re
    import subprocess
    import sys
    env = dict(os.environ, TGRAPH_CACHE_DIR=str(tmp_path), TGRAPH_PROFILE="first")
    for proc in ("first", "second"):
        out = subprocess.run([sys.executable, "-c", _LIBRARY_CHOICES], capture_output=True, text=True, timeout=300,
                             env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        diff = re.search(r"^max diff (\S+)", out.stdout, re.M)
        assert diff and float(diff.group(1)) < 1e-3, out.stdout
        asked = "cuDNN heuristics asked" in out.stderr, "cuBLASLt heuristic asked" in out.stderr
        if proc == "first":
            assert asked == (True, True), out.stderr[-3000:]
            assert len(list(tmp_path.glob("*.choice"))) >= 2
        else:
            assert asked == (False, False), out.stderr[-3000:]
            assert "cuDNN choice read from the disk cache" in out.stderr, out.stderr[-3000:]
            assert "cuBLASLt saved algorithm taken" in out.stderr, out.stderr[-3000:]


# A convolution met at a batch size far (more than 4x) from the one it was chosen at: the new
# size's first call runs it with that batch size's algorithm (kernels loaded) and asks cuDNN's
# heuristics after the call; the next call (captured) uses their answer. Every call against the
# CPU; with TGRAPH_NO_PROVISIONAL_CHOICES=1 the first call asks the heuristics itself. A fresh
# compile cache: a choice filed there would be this batch size's own.
_PROVISIONAL = r"""
import numpy as np
import tgraph as tg
rng = np.random.default_rng(5)
k = rng.standard_normal((3, 3, 8, 16)).astype(np.float32) * 0.2
g = tg.Graph()
x = g.placeholder([-1, 14, 10, 8], tg.f32, "x")
y = g.conv2d(x, g.constant(k), tg.ConvDesc(stride=[1, 1], explicit_padding=[1, 1, 1, 1]))
gpu, cpu = g.compile([x], [y], device="cuda"), g.compile([x], [y], device="cpu")
for b in (32, 1, 1, 1):
    a = rng.standard_normal((b, 14, 10, 8)).astype(np.float32)
    print("diff", b, float(np.abs(gpu.run([a])[0] - cpu.run([a])[0]).max()), flush=True)
"""


@pytest.mark.parametrize("provisional,profiled", [(True, True), (False, True), (True, False)])
def test_a_far_batch_size_first_runs_with_another_sizes_algorithm(provisional, profiled, tmp_path):
    """Profiled: which choice the first call took (profiling runs op by op). Not profiled: the
    calls are captured and replayed, the capture after the put-off questions' answers."""
    import os
    import re
    import subprocess
    import sys
    env = dict(os.environ, TGRAPH_CACHE_DIR=str(tmp_path))
    env.pop("TGRAPH_PROFILE", None)
    if profiled:
        env["TGRAPH_PROFILE"] = "first"
    if not provisional:
        env["TGRAPH_NO_PROVISIONAL_CHOICES"] = "1"
    out = subprocess.run([sys.executable, "-c", _PROVISIONAL], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    diffs = re.findall(r"^diff (\d+) (\S+)", out.stdout, re.M)
    assert len(diffs) == 4, out.stdout
    assert all(float(d) < 1e-3 for _, d in diffs), out.stdout
    if profiled:
        assert ("another batch size's algorithm" in out.stderr) == provisional, out.stderr[-3000:]
