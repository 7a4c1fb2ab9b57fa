"""PyTorch CPU counterpart of bench/cpu_ops.cpp: the same figures at the same shapes.

  (a) eager per-op overhead: a chain of 1,000 tiny ops (alternating add / mul on [4] f32)
  (b) matmul throughput at ResNet-50-like GEMM shapes
  (c) conv2d throughput at ResNet-50 shapes, batch 8, NCHW (contiguous) and channels_last
  (d) one training step (forward + backward) of a small CNN on 28x28x1, batch 128:
      conv3x3(1->32)+BN+ReLU, conv3x3(32->64, stride 2)+BN+ReLU, global avg pool, linear 64->10,
      softmax cross-entropy; gradients of every weight (NCHW and channels_last)

Warm-up runs, then the median of many timed runs; 2 threads (torch.set_num_threads(2)).
Usage: python3 bench/cpu_ops_torch.py [runs_scale=1] [cnn: only (d)]
"""
import sys
import time

import torch


def time_runs(f, warmup, runs):
    """(median, min) seconds of timed runs after warm-up."""
    for _ in range(warmup):
        f()
    t = []
    for _ in range(runs):
        a = time.perf_counter()
        f()
        t.append(time.perf_counter() - a)
    t.sort()
    return t[len(t) // 2], t[0]


def chain(scale):
    x = torch.rand(4) * 2 - 1
    c = torch.full((4,), 1.0001)

    def run():
        h = x
        for i in range(1000):
            h = h * c if i % 2 else h + c
        return h

    s, lo = time_runs(run, 20, 200 * scale)
    print(f"chain  1000 x add/mul [4] f32 (eager): median {s * 1e6:.1f} us/run = {s * 1e6 / 1000:.3f} us/op"
          f" (min {lo * 1e6 / 1000:.3f} us/op)")


def matmul(m, k, n, scale):
    a, b = torch.rand(m, k) * 2 - 1, torch.rand(k, n) * 2 - 1
    with torch.inference_mode():
        s, lo = time_runs(lambda: torch.matmul(a, b), 3, 20 * scale)
    f = 2 * m * k * n
    print(f"matmul [{m},{k}]x[{k},{n}]: median {s * 1e3:.3f} ms = {f / s * 1e-9:.1f} GFLOP/s"
          f" (min {lo * 1e3:.3f} ms = {f / lo * 1e-9:.1f} GFLOP/s)")


def conv(channels_last, n, hw, ci, co, kk, scale):
    x = torch.rand(n, ci, hw, hw) * 2 - 1
    w = torch.rand(co, ci, kk, kk) * 2 - 1
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    pad = kk // 2
    with torch.inference_mode():
        s, lo = time_runs(lambda: torch.nn.functional.conv2d(x, w, padding=pad), 3, 15 * scale)
    flop = 2 * n * hw * hw * co * ci * kk * kk
    name = "channels_last" if channels_last else "NCHW"
    print(f"conv2d {name} batch {n} {hw}x{hw}x{ci} -> {kk}x{kk} x{co} same: median {s * 1e3:.3f} ms = "
          f"{flop / s * 1e-9:.1f} GFLOP/s (min {lo * 1e3:.3f} ms = {flop / lo * 1e-9:.1f} GFLOP/s)")


def cnn_step(channels_last, scale):
    torch.manual_seed(0)
    b = 128
    x = torch.rand(b, 1, 28, 28) * 2 - 1
    labels = torch.zeros(b, 10)
    for i in range(b):
        labels[i, (i * 7) % 10] = 1.0
    w1 = (torch.rand(32, 1, 3, 3) - 0.5).requires_grad_()
    w2 = ((torch.rand(64, 32, 3, 3) - 0.5) * 0.2).requires_grad_()
    g1, b1 = torch.ones(32, requires_grad=True), torch.zeros(32, requires_grad=True)
    g2, b2 = torch.ones(64, requires_grad=True), torch.zeros(64, requires_grad=True)
    wf = ((torch.rand(64, 10) - 0.5) * 0.6).requires_grad_()
    bf = torch.zeros(10, requires_grad=True)
    params = [w1, g1, b1, w2, g2, b2, wf, bf]
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    F = torch.nn.functional

    def step():
        h = F.conv2d(x, w1, padding=1)
        h = F.relu(F.batch_norm(h, None, None, g1, b1, training=True))
        h = F.conv2d(h, w2, stride=2, padding=1)
        h = F.relu(F.batch_norm(h, None, None, g2, b2, training=True))
        h = h.mean(dim=(2, 3))
        loss = F.cross_entropy(h @ wf + bf, labels)
        return torch.autograd.grad(loss, params)

    s, lo = time_runs(step, 2, 10 * scale)
    name = "channels_last" if channels_last else "NCHW"
    print(f"cnn train step {name} (batch {b}, 28x28x1, conv-bn-relu x2, gap, linear, xent; fwd+bwd): "
          f"median {s * 1e3:.2f} ms (min {lo * 1e3:.2f} ms)")


def main():
    scale = max(1, int(sys.argv[1])) if len(sys.argv) > 1 else 1
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, mkldnn {torch.backends.mkldnn.is_available()}")
    if len(sys.argv) > 2 and sys.argv[2] == "cnn":
        for cl in (False, True):
            cnn_step(cl, scale)
        return
    chain(scale)
    matmul(256, 2048, 1000, scale)
    matmul(784, 1152, 128, scale)
    matmul(3136, 64, 256, scale)
    for cl in (True, False):
        conv(cl, 8, 56, 64, 64, 3, scale)
        conv(cl, 8, 28, 128, 128, 3, scale)
        conv(cl, 8, 56, 256, 64, 1, scale)
    for cl in (False, True):
        cnn_step(cl, scale)


if __name__ == "__main__":
    main()
