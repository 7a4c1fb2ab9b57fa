"""Where a training step's GPU time goes, by kernel family: the device-side view that
TGRAPH_PROFILE (host-timed, uncaptured) cannot give of a captured step.

Two sources, one table format:
  python3 bench/kernel_breakdown.py ncu FILE.csv --steps N
      reads `ncu --csv --page raw --metrics gpu__time_duration.sum --clock-control none
      --cache-control none <program>` output (every kernel of the run, captured graph nodes
      included) and divides by the N steps the program ran; without --steps, takes the last
      step (found by its period) and, given dram__bytes_read.sum and dram__bytes_write.sum
      columns, each family's time against its bytes at copy speed;
  python3 bench/kernel_breakdown.py torch [--path eager|inductor|tgraph_train] [--batch 256]
      profiles PyTorch ResNet-50 training steps (bf16 autocast, SGD momentum) with
      torch.profiler: eager or inductor (channels_last), or unchanged NCHW code through
      torch.compile(backend="tgraph_train") (tgraph's kernels run in the same process, so the
      profiler sees them too). Also prints the wall time per step and how much of it the GPU
      was busy (a gap is host work: launches, copies, synchronisation).
  python3 bench/kernel_breakdown.py mark [--path ...]
      one warmed-up step in the NVTX range "step", for `ncu --nvtx --nvtx-include "step/"`;
  python3 bench/kernel_breakdown.py host [--path ...] [--batch 256]
      the host side of the same steps: cProfile's most expensive Python and C++ entry points
      per step (what the host does while the GPU waits).
Prints ms per step for each family and the 25 most expensive kernel names."""
import argparse
import collections
import csv
import re
import sys

FAMILIES = [  # (family, regex on the kernel name), first match wins
    ("tgraph fused elementwise", r"^tg_ew"),
    ("tgraph stitched reductions", r"^tg_rs_|^tg_reduce|^tg_col_"),
    ("tgraph stencil", r"^tg_st|stencil"),
    ("convolution (cuDNN)", r"conv|fprop|dgrad|wgrad|xmma_.*(nhwc|implicit)|implicit_gemm|cudnn"),
    ("matmul (cuBLAS/Lt)", r"gemm|nvjet|cublas|cutlass"),
    ("batch norm (library)", r"batch_norm|bn_fw|bn_bw|welford"),
    ("pooling", r"pool"),
    ("triton (inductor)", r"^triton_"),
    ("copy / layout", r"copy|memcpy|memset|transpose|permute|convert"),
]


def family(name):
    for fam, rx in FAMILIES:
        if re.search(rx, name, re.IGNORECASE):
            return fam
    return "other"


def table(times, steps):
    """times: list of (kernel name, seconds)."""
    fams = collections.Counter()
    names = collections.Counter()
    counts = collections.Counter()
    for name, t in times:
        fams[family(name)] += t
        short = name[:90]
        names[short] += t
        counts[short] += 1
    total = sum(fams.values())
    print(f"{total / steps * 1e3:.2f} ms of kernels per step ({len(times) / steps:.0f} launches per step)")
    for fam, t in fams.most_common():
        print(f"  {fam:30s} {t / steps * 1e3:8.2f} ms  {100 * t / total:5.1f}%")
    print("most expensive kernels (ms per step, launches per step):")
    for name, t in names.most_common(25):
        print(f"  {t / steps * 1e3:8.3f}  x{counts[name] / steps:5.1f}  {name}")


COPY_BW = 4.26e12  # bytes/s, read + written: the H200's measured device-to-device copy


def one_step(names):
    """Length of the last repeated block of kernel names: the last two captured steps launch the
    same kernels in the same order, so the shortest period P with names[-P:] == names[-2P:-P]."""
    for p in range(50, len(names) // 2 + 1):
        if names[-p:] == names[-2 * p:-p]:
            return p
    return 0


def from_ncu(path, steps):
    """With dram__bytes_read/write columns too (and no --steps), times one step found by its period
    against its bytes at copy speed: what each family loses above the memory floor."""
    rows = list(csv.reader(open(path, newline="")))
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    cols = rows[head]
    k, d = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
    rb = cols.index("dram__bytes_read.sum") if "dram__bytes_read.sum" in cols else -1
    wb = cols.index("dram__bytes_write.sum") if "dram__bytes_write.sum" in cols else -1
    recs = []  # (name, seconds, bytes)
    for r in rows[head + 1:]:
        if len(r) <= max(k, d, rb, wb):
            continue
        try:
            t = float(r[d].replace(",", "")) * 1e-9  # ns, with --print-units base
            b = (float(r[rb].replace(",", "")) + float(r[wb].replace(",", ""))) if rb >= 0 else 0.0
        except ValueError:
            continue  # the units row
        recs.append((r[k], t, b))
    if not steps:
        p = one_step([n for n, _, _ in recs])
        if not p:
            sys.exit("no repeated step found: pass --steps")
        recs, steps = recs[-p:], 1
        print(f"one step: the last {p} kernels")
    table([(n, t) for n, t, _ in recs], steps)
    if rb < 0:
        return
    fam = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])  # time, bytes, excess, launches
    worst = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for n, t, b in recs:
        f = fam[family(n)]
        floor = b / COPY_BW
        f[0] += t; f[1] += b; f[2] += max(0.0, t - floor); f[3] += 1
        w = worst[n[:90]]
        w[0] += max(0.0, t - floor); w[1] += t; w[2] += 1
    print(f"per step, against {COPY_BW / 1e12:.2f} TB/s:")
    print(f"  {'family':30s} {'ms':>8s} {'GB':>7s} {'floor ms':>9s} {'above':>7s} launches")
    for n, (t, b, e, c) in sorted(fam.items(), key=lambda x: -x[1][0]):
        print(f"  {n:30s} {t / steps * 1e3:8.2f} {b / steps / 1e9:7.2f} {b / steps / COPY_BW * 1e3:9.2f}"
              f" {e / steps * 1e3:7.2f} {c / steps:6.0f}")
    print("most time above the memory floor (ms per step: above, total, launches):")
    for n, (e, t, c) in sorted(worst.items(), key=lambda x: -x[1][0])[:30]:
        print(f"  {e / steps * 1e3:7.3f} {t / steps * 1e3:7.3f} x{c / steps:5.0f}  {n}")


PRECISION = "bf16"


def torch_step(path, batch):
    """A warmed-up ResNet-50 training step of `path` (see the module's docstring)."""
    import torch
    from resnet_train_setup import resnet50_training
    step = resnet50_training(batch, path, PRECISION)[-1]
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    return step


class _TimedExe:
    """An executable whose run_device calls are timed on the host (the rest passes through)."""

    def __init__(self, exe, times):
        self._exe, self._times = exe, times

    def __getattr__(self, name):
        return getattr(self._exe, name)

    def run_device(self, *args, **kwargs):
        import time
        t0 = time.perf_counter()
        r = self._exe.run_device(*args, **kwargs)
        self._times.append(time.perf_counter() - t0)
        return r


def tgraph_calls(step, made, steps=5):
    """Host time of each tgraph call of a step (the whole frontend call, and run_device in it),
    queued behind the GPU as in training, then with the GPU idle before each call; and each
    executable's run_stats."""
    import statistics
    import time

    import torch
    import tgraph.torch as tt
    calls, runs = {}, {}
    for c in made:
        calls[id(c)], runs[id(c)] = [], []
        c.exe = _TimedExe(c.exe, runs[id(c)])
    plain = tt._Compiled.__call__
    for idle in (False, True):
        def timed(self, flat, idle=idle):
            if idle:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            r = plain(self, flat)
            calls[id(self)].append(time.perf_counter() - t0)
            return r
        tt._Compiled.__call__ = timed
        for v in (*calls.values(), *runs.values()):
            v.clear()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        print(f"tgraph calls, {'GPU idle before each' if idle else 'queued as in training'}:")
        for k, c in enumerate(made):
            if calls[id(c)]:
                print(f"  executable {k}: {len(c.exe.input_types)} inputs, {len(c.outs)} outputs: call "
                      f"{statistics.median(calls[id(c)]) * 1e3:.2f} ms, run_device {statistics.median(runs[id(c)]) * 1e3:.2f} ms")
    tt._Compiled.__call__ = plain
    for k, c in enumerate(made):
        print(f"  executable {k} run_stats: {c.exe.run_stats}")
    import tgraph
    in_use, peak = tgraph.Device.cuda(0).memory()
    print(f"device memory: torch peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB; tgraph in use "
          f"{in_use / 2**30:.1f} GiB, peak {peak / 2**30:.1f} GiB")


def from_host(path, batch):
    import cProfile
    import pstats
    import time

    import torch
    made = []
    if path == "tgraph_train":
        import tgraph.torch as tt
        init = tt._Compiled.__init__

        def record(self, *args, **kwargs):
            init(self, *args, **kwargs)
            made.append(self)
        tt._Compiled.__init__ = record
    step = torch_step(path, batch)
    steps = 5
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    host = (time.perf_counter() - t0) / steps
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps
    print(f"PyTorch {path}, batch {batch}: host {host * 1e3:.1f} ms/step queueing (profiled), "
          f"{wall * 1e3:.1f} ms/step with the GPU's tail")
    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:30]  # by own time
    print("  own ms/step  cum ms/step  calls/step  function")
    for (file, line, fn), (cc, nc, tt, ct, _) in rows:
        where = fn if file == "~" else f"{file.split('/')[-1]}:{line}({fn})"
        print(f"  {tt / steps * 1e3:10.2f}  {ct / steps * 1e3:10.2f}  {nc / steps:9.0f}  {where[:100]}")
    if made:
        tgraph_calls(step, made)


def from_torch(path, batch):
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile
    step = torch_step(path, batch)
    steps = 5
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0]
    times = [(e.name, e.device_time * 1e-6) for e in kernels]
    busy = sum(t for _, t in times) / steps
    print(f"PyTorch {path}, batch {batch}, {PRECISION}: {wall * 1e3:.1f} ms/step wall (unprofiled), "
          f"GPU busy {busy * 1e3:.1f} ms/step")
    table(times, steps)
    idle_gaps(kernels, steps)


def idle_gaps(kernels, steps):
    """Where the GPU sat idle between kernels, by the gap's length: a few microseconds between
    kernels of one captured graph is the launch latency of its nodes; tens of microseconds or
    more is the host arriving late (or a synchronisation). The largest, with their neighbours."""
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in kernels)
    gaps, end, prev = [], None, ""
    for s, e, n in spans:
        if end is not None and s > end:
            gaps.append((s - end, prev, n))
        if end is None or e > end:
            end, prev = e, n
    bins = [(0, 3), (3, 10), (10, 50), (50, 1e12)]
    print("GPU idle between kernels (ms per step, gaps per step):")
    for lo, hi in bins:
        g = [d for d, _, _ in gaps if lo <= d < hi]
        print(f"  gaps {lo:>3} us..{'' if hi > 1e9 else hi}: {sum(g) / steps / 1e3:7.2f} ms  x{len(g) / steps:6.0f}")
    print("largest gaps (us: kernel before -> kernel after):")
    for d, a, b in sorted(gaps, reverse=True)[:12]:
        print(f"  {d:8.1f}: {a[:60]} -> {b[:60]}")


def marked_step(path, batch):
    """One warmed-up step inside the NVTX range "step", for Nsight Compute to profile alone:
    ncu --nvtx --nvtx-include "step/" ... python3 bench/kernel_breakdown.py mark --path ...
    (then `kernel_breakdown.py ncu` on its CSV)."""
    import torch
    step = torch_step(path, batch)
    # The backward runs on the calling thread, inside the range (autograd's own device thread
    # would be outside it: NVTX ranges are per thread).
    with torch.autograd.set_multithreading_enabled(False):
        step()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("step")
        step()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="src", required=True)
    n = sub.add_parser("ncu")
    n.add_argument("csv")
    n.add_argument("--steps", type=int, default=0,
                   help="steps the run made (default: find one step by its period)")
    t = sub.add_parser("torch")
    t.add_argument("--path", choices=["eager", "inductor", "tgraph_train"], default="eager")
    t.add_argument("--batch", type=int, default=256)
    h = sub.add_parser("host")
    h.add_argument("--path", choices=["eager", "inductor", "tgraph_train"], default="tgraph_train")
    h.add_argument("--batch", type=int, default=256)
    k = sub.add_parser("mark")
    k.add_argument("--path", choices=["eager", "inductor", "tgraph_train"], default="tgraph_train")
    k.add_argument("--batch", type=int, default=256)
    for p in (t, h, k):
        p.add_argument("--precision", choices=["bf16", "tf32"], default="bf16",
                       help="bf16 autocast, or f32 with TF32 matmuls and convolutions")
    a = ap.parse_args()
    global PRECISION
    PRECISION = getattr(a, "precision", "bf16")
    if a.src == "ncu":
        from_ncu(a.csv, a.steps)
    elif a.src == "mark":
        marked_step(a.path, a.batch)
    elif a.src == "host":
        from_host(a.path, a.batch)
    else:
        from_torch(a.path, a.batch)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
