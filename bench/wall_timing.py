"""The Python benchmarks' timing loops: median wall time of a call after warm-up, with an
optional synchronisation (torch.cuda.synchronize) after each call so GPU work is counted; and
median device time of a call from CUDA events around it (cuda_event_ms)."""
import statistics
import time


def median_seconds(fn, iters, warm, sync=None):
    for _ in range(warm):
        fn()
    if sync:
        sync()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def cuda_event_ms(fn, iters=50, warmup=5):
    import torch
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
