"""PyTorch figures for bench/gpu_bench.cpp, measured in the same device run (CUDA events,
warm-up, median)."""
import statistics
import time

import torch


def cuda_ms(fn, iters=50, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


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


if __name__ == "__main__":
    main()
