"""Where a fresh process's CUDA start goes (issue 22: a saved executable loaded and first-run in
300 ms, of which CUDA's start was measured at 0.2-0.3 s): the driver's load and cuInit, the
primary context, a first allocation, the runtime, cuBLASLt's and cuDNN's libraries and handles,
each timed in turn, through ctypes (no tgraph, no torch unless asked: `torch` first imports it,
as tgraph.torch's processes have). Run it several times: the first process after the GPU was
idle may pay the driver's own start-up.
On the GPU machine:  python3 bench/cuda_start.py [torch] [matmuls]
(`matmuls`: then BERT-base's f16 matmul shapes' first calls through torch, each against its second.)"""
import ctypes
import sys
import time


def main():
    if "torch" in sys.argv[1:]:
        import torch  # noqa: F401  (its cuDNN and cuBLASLt are then the process's)
    marks = [("start", time.perf_counter())]

    def mark(what):
        marks.append((what, time.perf_counter()))

    cu = ctypes.CDLL("libcuda.so.1")
    mark("dlopen libcuda")
    assert cu.cuInit(0) == 0
    mark("cuInit")
    dev = ctypes.c_int()
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    mark("primary context retained")
    assert cu.cuCtxSetCurrent(ctx) == 0
    p = ctypes.c_void_p()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0
    mark("first allocation")
    rt = ctypes.CDLL("libcudart.so.13")
    mark("dlopen cudart")
    assert rt.cudaFree(None) == 0
    mark("cudaFree(0)")
    lt = ctypes.CDLL("libcublasLt.so.13")
    mark("dlopen cublasLt")
    h = ctypes.c_void_p()
    assert lt.cublasLtCreate(ctypes.byref(h)) == 0
    mark("cublasLtCreate")
    dn = ctypes.CDLL("libcudnn.so.9")
    mark("dlopen cudnn")
    h2 = ctypes.c_void_p()
    assert dn.cudnnCreate(ctypes.byref(h2)) == 0
    mark("cudnnCreate")
    h3 = ctypes.c_void_p()
    assert dn.cudnnCreate(ctypes.byref(h3)) == 0
    mark("cudnnCreate again")
    for (_, t0), (what, t1) in zip(marks, marks[1:]):
        print(f"{what:26s} {1e3 * (t1 - t0):8.1f} ms")
    print(f"{'total':26s} {1e3 * (marks[-1][1] - marks[0][1]):8.1f} ms (cuDNN {dn.cudnnGetVersion()})")
    if "matmuls" in sys.argv[1:]:
        first_matmuls()


def first_matmuls():
    """Each of BERT-base's f16 matmul shapes' first call in this process against its second,
    through torch (its cuBLAS / cuBLASLt): what a library kernel's first load costs."""
    import torch
    torch.zeros(1, device="cuda")
    for m, k, n in [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (2048, 768, 768), (2048, 768, 3072),
                    (2048, 3072, 768), (16, 768, 768)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        times = []
        for _ in range(2):
            torch.cuda.synchronize()
            t = time.perf_counter()
            torch.matmul(a, b)
            torch.cuda.synchronize()
            times.append(1e3 * (time.perf_counter() - t))
        print(f"first matmul f16 {m} x {k} x {n}: {times[0]:7.1f} ms, second {times[1]:.2f} ms")


if __name__ == "__main__":
    main()
