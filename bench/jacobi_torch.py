"""PyTorch peer of examples/jacobi_while_loop.cpp: the same Jacobi solve, the way a PyTorch user
writes it — a Python loop that checks the residual with .item() every iteration (one device-to-
host sync per step) — plus the same loop with the inputs already on the device.

usage: python3 bench/jacobi_torch.py [n] [repeat] [tol] [max_iters]
Prints the median over `repeat` solves after a warm-up, host wall clock, like the example.
"""
import statistics
import sys
import time

import numpy as np
import torch


def problem(n):
    # The fixed formula of examples/jacobi_while_loop.cpp: both solve exactly the same system.
    i = np.arange(n, dtype=np.int64)[:, None]
    j = np.arange(n, dtype=np.int64)[None, :]
    a = (((i * 7919 + j * 104729) % 1000) / 1000.0)
    np.fill_diagonal(a, 0.0)
    np.fill_diagonal(a, 1.25 * a.sum(axis=1))  # iteration matrix row sums 0.8
    b = ((np.arange(n, dtype=np.int64) * 31337) % 2000) / 1000.0 - 1.0
    return a.astype(np.float32), b.reshape(n, 1).astype(np.float32)


def solve(A, B, tol, max_iters):
    d = torch.diagonal(A).unsqueeze(1)
    R = A - torch.diag(torch.diagonal(A))
    limit = tol * torch.linalg.vector_norm(B).item()
    x = torch.zeros_like(B)
    it = 0
    res = float("inf")
    while res > limit and it < max_iters:
        x = (B - R @ x) / d
        res = torch.linalg.vector_norm(A @ x - B).item()  # the host decides: one sync a step
        it += 1
    return x, it, res


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    max_iters = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = problem(n)
    # Ordinary (pageable) host memory, as tgraph's TensorData is.
    a_host, b_host = torch.from_numpy(a), torch.from_numpy(b)

    def from_host():
        A, B = a_host.to(dev), b_host.to(dev)
        x, it, res = solve(A, B, tol, max_iters)
        return x.cpu(), it, res

    A_dev, B_dev = a_host.to(dev), b_host.to(dev)

    def on_device():
        x, it, res = solve(A_dev, B_dev, tol, max_iters)
        return x, it, res

    for name, fn in (("from host (inputs copied in, x copied out)", from_host), ("inputs on the device", on_device)):
        fn()
        times, it = [], 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            _, it, res = fn()
            if dev == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        ms = statistics.median(times)
        print(f"torch {dev} n={n} {name}: {it} iterations, {ms:.3f} ms (median of {repeat}), "
              f"{1e3 * ms / max(it, 1):.2f} us/iter")
    x, it, _ = from_host()
    rel = np.linalg.norm(a.astype(np.float64) @ x.numpy().astype(np.float64) - b) / np.linalg.norm(b)
    print(f"torch host check: ||A x - b|| / ||b|| = {rel:.3e}")


if __name__ == "__main__":
    main()
