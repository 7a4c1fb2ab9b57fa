"""PyTorch figures for bench/gpu_bench.cpp, measured in the same device run (CUDA events,
warm-up, median)."""
import statistics
import time

import torch

from wall_timing import cuda_event_ms as cuda_ms


def main():
    dev = "cuda"
    n = 64 << 20
    x, a, b, c = (torch.empty(n, device=dev).uniform_(-1, 1) for _ in range(4))
    f = lambda: torch.nn.functional.gelu(x * a + b) * c
    print(f"torch eager gelu(x*a+b)*c 64M f32: {cuda_ms(f):.3f} ms")
    try:
        fc = torch.compile(f)
        print(f"torch.compile gelu(x*a+b)*c 64M f32: {cuda_ms(fc):.3f} ms")
    except Exception as err:  # noqa: BLE001 - report and go on
        print(f"torch.compile unavailable: {err}")
    m = 8192
    A = torch.empty(m, m, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
    B = torch.empty(m, m, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
    ms = cuda_ms(lambda: A @ B, iters=20)
    print(f"torch bf16 GEMM 8192^3: {ms:.3f} ms ({2 * m**3 / (ms * 1e-3) / 1e12:.0f} TFLOP/s)")
    t = torch.empty(4, device=dev).uniform_(-1, 1)

    def chain():
        y = t
        for i in range(1000):
            y = y + t if i % 2 else y * 0.999
        return y

    for _ in range(5):
        chain()
    torch.cuda.synchronize()
    walls = []
    for _ in range(30):
        t0 = time.perf_counter()
        chain()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e6)
    w = statistics.median(walls)
    print(f"torch eager 1000-op tiny chain: {w:.1f} us per run ({w / 1000:.2f} us per op)")


def while_loop(n=10000):
    """Peer of bench_while_loop in gpu_bench.cpp: the condition is checked on the host with
    .item() each iteration (what eager PyTorch code does for a data-dependent loop)."""
    dev = "cuda"
    x = torch.empty(1024, device=dev).uniform_(-1, 1)
    limit = torch.tensor(n, dtype=torch.int32, device=dev)

    def loop():
        y, i = x, torch.zeros((), dtype=torch.int32, device=dev)
        while (i < limit).item():
            y = y * 0.5 + 1
            i = i + 1
        return y

    ms = cuda_ms(loop, iters=5, warmup=1)
    print(f"torch eager while_loop x=x*0.5+1 on 1024 f32, {n} iterations (.item() per iteration): "
          f"{ms * 1e3 / n:.2f} us per iteration")


def gather_nd(rows=1 << 20, dim=256, table_rows=1 << 20):
    """Peer of bench_gather_nd in gpu_bench.cpp: an embedding lookup table[idx]."""
    dev = "cuda"
    table = torch.empty(table_rows, dim, device=dev).uniform_(-1, 1)
    idx = torch.randint(0, table_rows, (rows,), device=dev)
    ms = cuda_ms(lambda: table[idx])
    gbs = (2.0 * rows * dim * 4 + rows * 8) / (ms * 1e-3) / 1e9
    print(f"torch table[idx] 1M x 256 f32 from a 1M-row table: {ms:.3f} ms ({gbs:.0f} GB/s, "
          f"{gbs / 4260 * 100:.1f}% of 4260 GB/s)")


def stencil(n=8192, m=512):
    """Peers of bench_stencil in gpu_bench.cpp: the 5-point Laplacian as conv2d (3x3 kernel,
    zero padding), the 7-point one as conv3d, and max_pool2d (unweighted 3x3 max, with and
    without indices) for the max / argmax modes; cuDNN autotuned."""
    dev = "cuda"
    torch.backends.cudnn.benchmark = True
    floor2 = 2.0 * n * n * 4 / 4.26e12 * 1e3

    def report(what, ms, floor):
        print(f"torch {what}: {ms:.3f} ms ({floor / ms * 100:.1f}% of the 4260 GB/s floor {floor:.3f} ms)")

    x = torch.empty(1, 1, n, n, device=dev).uniform_(-1, 1)
    lap2 = torch.tensor([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=torch.float32, device=dev).view(1, 1, 3, 3)
    F = torch.nn.functional
    with torch.no_grad():
        report("conv2d 5-point Laplacian 8192^2 f32", cuda_ms(lambda: F.conv2d(x, lap2, padding=1)), floor2)
        report("max_pool2d 3x3 stride 1 8192^2 f32", cuda_ms(lambda: F.max_pool2d(x, 3, 1, 1)), floor2)
        report("max_pool2d 3x3 with indices 8192^2 f32",
               cuda_ms(lambda: F.max_pool2d(x, 3, 1, 1, return_indices=True)), floor2)
        fused = lambda: F.relu(F.conv2d(x * 0.5 + 1, lap2, padding=1)) * 2
        report("eager relu(conv2d(x*0.5+1))*2 8192^2 f32", cuda_ms(fused), floor2)
        try:
            report("torch.compile relu(conv2d(x*0.5+1))*2 8192^2 f32", cuda_ms(torch.compile(fused)), floor2)
        except Exception as err:  # noqa: BLE001 - report and go on
            print(f"torch.compile unavailable: {err}")
        v = torch.empty(1, 1, m, m, m, device=dev).uniform_(-1, 1)
        lap3 = torch.zeros(3, 3, 3, device=dev)
        lap3[1, 1, 1] = -6
        for a, b, c in ((0, 1, 1), (2, 1, 1), (1, 0, 1), (1, 2, 1), (1, 1, 0), (1, 1, 2)):
            lap3[a, b, c] = 1
        ms = cuda_ms(lambda: F.conv3d(v, lap3.view(1, 1, 3, 3, 3), padding=1), iters=30)
        report("conv3d 7-point Laplacian 512^3 f32", ms, 2.0 * m**3 * 4 / 4.26e12 * 1e3)


def bias_grad(m=16384, k=1024, n=4096):
    # Linear's weight and bias gradients as autograd computes them: x^T dy and dy.sum(0).
    torch.backends.cuda.matmul.allow_tf32 = False
    for dt in (torch.bfloat16, torch.float32):
        x = torch.empty(m, k, device="cuda", dtype=dt).uniform_(-1, 1)
        dy = torch.empty(m, n, device="cuda", dtype=dt).uniform_(-1, 1)
        ms = cuda_ms(lambda: (x.t() @ dy, dy.sum(0)), iters=20)
        print(f"torch Linear weight+bias gradient {dt} x^T dy + dy.sum(0): {ms:.3f} ms "
              f"({2 * m * k * n / (ms * 1e-3) / 1e12:.0f} TFLOP/s)")


def broadcast():
    # The same products as bench_gpu's broadcast part.
    x = torch.rand(64, 56, 56, 256, device="cuda") * 2 - 1
    for what, other in [("x*y (same shape)", (64, 56, 56, 256)), ("x*g (per channel)", (256,)),
                        ("x*g (per image)", (64, 1, 1, 1))]:
        y = torch.rand(*other, device="cuda")
        ms = cuda_ms(lambda: x * y)
        moved = 2 * x.numel() * 4 + (x.numel() * 4 if y.shape == x.shape else 0)
        print(f"torch broadcast {what:20s} [64,56,56,256] f32: {ms:.3f} ms ({moved / ms / 1e9:.2f} TB/s)")


def batch_norm():
    # PyTorch's training-mode batch norm (it picks cuDNN or its own kernels per layout), forward
    # and forward + backward, on channels_last and on contiguous NCHW.
    F = torch.nn.functional
    w = torch.empty(256, device="cuda").uniform_(0.5, 1.5)
    b = torch.empty(256, device="cuda").uniform_(-0.5, 0.5)
    rm, rv = torch.zeros(256, device="cuda"), torch.ones(256, device="cuda")
    for fmt in (torch.channels_last, torch.contiguous_format):
        x = torch.empty(64, 256, 56, 56, device="cuda").uniform_(-1, 1).to(memory_format=fmt)
        dy = torch.empty_like(x).uniform_(-1, 1)
        with torch.no_grad():
            ms = cuda_ms(lambda: F.batch_norm(x, rm, rv, w, b, training=True), iters=20)
        name = "channels_last" if fmt == torch.channels_last else "NCHW"
        print(f"torch batch norm training [64,256,56,56] {name} f32, forward: {ms:.3f} ms")
        xg, wg, bg = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()

        def fwd_bwd():
            y = F.batch_norm(xg, rm, rv, wg, bg, training=True)
            return torch.autograd.grad(y, (xg, wg, bg), dy)

        ms = cuda_ms(fwd_bwd, iters=20)
        print(f"torch batch norm training [64,256,56,56] {name} f32, forward + backward: {ms:.3f} ms")

def layer_norm():
    # F.layer_norm over the last dim of [8192, 1024] f32, forward and forward + backward.
    F = torch.nn.functional
    x = torch.empty(8192, 1024, device="cuda").uniform_(-1, 1)
    dy = torch.empty_like(x).uniform_(-1, 1)
    w = torch.empty(1024, device="cuda").uniform_(0.5, 1.5)
    b = torch.empty(1024, device="cuda").uniform_(-0.5, 0.5)
    with torch.no_grad():
        ms = cuda_ms(lambda: F.layer_norm(x, (1024,), w, b, 1e-5), iters=20)
    print(f"torch layer norm [8192,1024] f32, forward: {ms:.3f} ms")
    xg, wg, bg = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()

    def fwd_bwd():
        y = F.layer_norm(xg, (1024,), wg, bg, 1e-5)
        return torch.autograd.grad(y, (xg, wg, bg), dy)

    ms = cuda_ms(fwd_bwd, iters=20)
    print(f"torch layer norm [8192,1024] f32, forward + backward: {ms:.3f} ms")


def mlp():
    # y = act(x w1 + b1) w2 + b2, bf16, [8192,1024] -> 4096 -> 1024, forward + backward of sum(y * dy)
    # (gradients of x, w1, b1, w2, b2): eager and torch.compile.
    F = torch.nn.functional
    bf = torch.bfloat16
    x = torch.empty(8192, 1024, device="cuda", dtype=bf).uniform_(-1, 1).requires_grad_()
    dy = torch.empty(8192, 1024, device="cuda", dtype=bf).uniform_(-1, 1)
    w1 = torch.empty(1024, 4096, device="cuda", dtype=bf).uniform_(-0.03, 0.03).requires_grad_()
    b1 = torch.empty(4096, device="cuda", dtype=bf).uniform_(-0.5, 0.5).requires_grad_()
    w2 = torch.empty(4096, 1024, device="cuda", dtype=bf).uniform_(-0.03, 0.03).requires_grad_()
    b2 = torch.empty(1024, device="cuda", dtype=bf).uniform_(-0.5, 0.5).requires_grad_()
    for name, act in (("gelu_tanh", lambda h: F.gelu(h, approximate="tanh")), ("relu", F.relu)):
        def step():
            y = act(x @ w1 + b1) @ w2 + b2
            return y, *torch.autograd.grad(y, (x, w1, b1, w2, b2), dy)

        flops = 6 * 2.0 * 8192 * 1024 * 4096
        ms = cuda_ms(step, iters=20)
        print(f"torch eager MLP {name} [8192,1024]->4096->1024 bf16 forward + backward: {ms:.3f} ms "
              f"({flops / (ms * 1e-3) / 1e12:.0f} TFLOP/s)")
        try:
            compiled = torch.compile(step)
            ms = cuda_ms(compiled, iters=20)
            print(f"torch.compile MLP {name} [8192,1024]->4096->1024 bf16 forward + backward: {ms:.3f} ms "
                  f"({flops / (ms * 1e-3) / 1e12:.0f} TFLOP/s)")
        except Exception as err:  # noqa: BLE001 - report and go on
            print(f"torch.compile MLP unavailable: {err}")


def fp8_matmul():
    """Peer of bench_fp8_matmul in gpu_bench.cpp: torch._scaled_mm (e4m3 operands, b column-major,
    per-tensor scales, bf16 result) beside torch's bf16 matmul, same shapes."""
    dev = "cuda"
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 3072, 768), (4096, 768, 3072)):
        flop = 2.0 * m * n * k
        a = torch.empty(m, k, device=dev).uniform_(-4, 4).to(torch.float8_e4m3fn)
        b = torch.empty(n, k, device=dev).uniform_(-4, 4).to(torch.float8_e4m3fn)
        sa = torch.tensor(0.5, device=dev)
        sb = torch.tensor(0.25, device=dev)
        ms8 = cuda_ms(lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), iters=30)
        a16 = torch.empty(m, k, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
        b16 = torch.empty(n, k, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
        ms16 = cuda_ms(lambda: a16 @ b16.t(), iters=30)
        print(f"torch matmul [{m} x {k}] x [{n} x {k}]^T: _scaled_mm e4m3 -> bf16 {ms8:.3f} ms "
              f"({flop / (ms8 * 1e-3) / 1e12:.0f} TFLOP/s), bf16 {ms16:.3f} ms ({flop / (ms16 * 1e-3) / 1e12:.0f} "
              f"TFLOP/s): fp8 {ms16 / ms8:.2f}x bf16")


if __name__ == "__main__":
    # With arguments, only the named parts: python3 bench/gpu_bench_torch.py bias_grad
    parts = {"main": main, "while_loop": while_loop, "gather_nd": gather_nd, "stencil": stencil, "bias_grad": bias_grad, "broadcast": broadcast,
             "batch_norm": batch_norm, "layer_norm": layer_norm, "mlp": mlp, "fp8_matmul": fp8_matmul}
    import sys

    for name in sys.argv[1:] or list(parts):
        parts[name]()
