"""The Python benchmarks' one timing loop: median wall time of a call after warm-up, with an
optional synchronisation (torch.cuda.synchronize) after each call so GPU work is counted."""
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
