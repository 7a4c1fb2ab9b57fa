"""What a run costs from Python: tgraph's Executable called from Python against PyTorch eager on
the same work, wall clock per call (median of many, after warm-up), on the CPU and, when present,
on the GPU (each call synchronised). Usage: PYTHONPATH=<build>/python python3 bench/py_overhead.py"""
import numpy as np

import tgraph as tg
from wall_timing import median_seconds


def per_call(fn, n=2000, warm=200):
    return median_seconds(fn, n, warm) * 1e6


def chain_graph(shape, device, ops=20):
    g = tg.Graph()
    x = g.placeholder(shape, tg.f32, "x")
    y = x
    for i in range(ops):  # cheap elementwise ops (one fused kernel): the cost is the call's
        y = y * 0.9 + 0.1 if i % 2 else g.relu(y) * 1.5
    return g.compile([x], [y], device=device)


def torch_chain(x, ops=20):
    import torch
    y = x
    for i in range(ops):
        y = y * 0.9 + 0.1 if i % 2 else torch.relu(y) * 1.5
    return y


def main():
    try:
        import torch
    except ImportError:
        torch = None
    shape = (64, 64)
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    exe = chain_graph(shape, "cpu")
    print(f"cpu: 20-op chain (relu, *, +) on {shape}, Executable.run from Python: {per_call(lambda: exe.run([a])):.1f} us/call")
    if torch is not None:
        ta = torch.from_numpy(a)
        print(f"cpu: same chain, PyTorch eager: {per_call(lambda: torch_chain(ta)):.1f} us/call")
    if tg.Device.cuda_device_count() == 0:
        return
    gexe = chain_graph(shape, "cuda")
    d = tg.DeviceTensor(a, tg.Device.cuda(0))
    print(f"cuda: 20-op chain (relu, *, +) on {shape}, run_device from Python: {per_call(lambda: gexe.run_device([d])):.1f} us/call")
    print(f"cuda: same, Executable.run on numpy (copies in and out): {per_call(lambda: gexe.run([a])):.1f} us/call")
    if torch is not None and torch.cuda.is_available():
        tc = torch.from_numpy(a).cuda()

        def eager():
            torch_chain(tc)
            torch.cuda.synchronize()
        print(f"cuda: same chain, PyTorch eager (synchronised): {per_call(eager):.1f} us/call")
        t = tg.from_dlpack(tc)
        print(f"cuda: run_device on a torch tensor via DLPack: {per_call(lambda: torch.from_dlpack(gexe.run_device([t])[0])):.1f} us/call")
        np.testing.assert_allclose(gexe.run_device([t])[0].numpy(), torch_chain(tc).cpu().numpy(), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    main()
