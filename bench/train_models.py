"""ResNet-50 training on the GPU, every path side by side in one command (issue 20): PyTorch eager
and torch.compile (inductor), unchanged torchvision code compiled with
torch.compile(backend="tgraph_train"), and tgraph's C++ API (bench_train_resnet, run as a
subprocess). Batch 256 under bf16 autocast (channels_last for PyTorch's own rows) and batch 128
in f32 with TF32 allowed; random data, SGD momentum 0.9, cross-entropy.

Each row: the median step after warm-up as a training loop runs them, back to back on the GPU's
timeline (CUDA events between steps, no synchronisation: the host's work overlaps the GPU's,
as it does when the loss is not read every step), images/s from it; the median wall time of a
step synchronised after each (latency: the host's work before the GPU starts included); the first step
(compile, kernels, autotuning), peak device memory (torch.cuda.max_memory_allocated for
PyTorch's rows, tgraph's pool and graph high-water mark for the C++ row), and the loss of the
first --curve steps (eager and tgraph_train start from the same weights and see the same data).

Usage: PYTHONPATH=<build>/python python3 bench/train_models.py --cpp <build>/bench/bench_train_resnet
         [--paths eager,inductor,tgraph_train,cpp] [--configs bf16:256,tf32:128] [--iters 20]
         [--curve 50] [--json out.json]"""
import argparse
import gc
import copy
import json
import statistics
import subprocess
import sys
import time

import torch
import torchvision

from wall_timing import median_seconds


def train_step(model, run, opt, x, y, autocast):
    def step():
        with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


def steady_step_ms(step, iters):
    """The median step as training runs: steps queued back to back (no synchronisation between
    them, as a training loop that does not read the loss every step), each timed by CUDA events
    recorded on the stream before and after it, so a step's time is its span on the GPU's
    timeline — including any wait for the host, excluding host work the GPU overlaps."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        step()
        ev[i + 1].record()
    ev[-1].synchronize()
    return statistics.median(ev[i].elapsed_time(ev[i + 1]) for i in range(iters))


def measure_torch(path, base, x, y, prec, iters, curve):
    autocast = prec == "bf16"
    model = copy.deepcopy(base)
    if path != "tgraph_train" and autocast:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if path == "eager":
        run = model
    elif path == "inductor":
        run = torch.compile(model)
    else:
        import tgraph.torch  # noqa: F401  (registers the backends)
        run = torch.compile(model, backend="tgraph_train", dynamic=False)
    step = train_step(model, run, opt, x, y, autocast)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    if path == "tgraph_train":
        import tgraph
        tgraph.Device.cuda(0).reset_peak_memory()
    def peaks():  # torch's, and tgraph's own (its pool and captured graphs, which torch does not see)
        import tgraph
        t = torch.cuda.max_memory_allocated() / 2**30
        return (t, tgraph.Device.cuda(0).memory()[1] / 2**30) if path == "tgraph_train" else (t, 0.0)

    t0 = time.perf_counter()
    losses = [float(step().detach())]
    first_s = time.perf_counter() - t0
    first_peaks = peaks()
    losses += [float(step().detach()) for _ in range(max(curve, 1) - 1)]
    ms = steady_step_ms(step, iters)
    synced = median_seconds(step, iters, 3, torch.cuda.synchronize) * 1e3
    all_peaks = peaks()
    # the two peaks need not coincide: their sum is an upper bound
    return {"step_ms": ms, "synced_ms": synced, "images_per_s": x.shape[0] / ms * 1e3, "first_step_s": first_s,
            "peak_gib": sum(all_peaks), "peak_first_step_gib": sum(first_peaks),
            "peak_torch_tgraph_gib": all_peaks, "loss": losses[:curve]}


def measure_cpp(binary, batch, prec, iters, curve):
    out = subprocess.run([binary, "--batch", str(batch), "--precision", prec, "--iters", str(iters),
                          "--curve", str(curve)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpp", default="build-gpu/bench/bench_train_resnet")
    ap.add_argument("--paths", default="eager,inductor,tgraph_train,cpp")
    ap.add_argument("--configs", default="bf16:256,tf32:128")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--curve", type=int, default=50)
    ap.add_argument("--json")
    a = ap.parse_args()
    paths = a.paths.split(",")
    rows = []
    for cfg in a.configs.split(","):
        prec, batch = cfg.split(":")
        batch = int(batch)
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        torch.backends.cudnn.allow_tf32 = prec == "tf32"
        torch.manual_seed(0)
        base = torchvision.models.resnet50(num_classes=1000).cuda().train()
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        for path in paths:
            label = {"eager": "PyTorch eager", "inductor": "torch.compile (inductor)",
                     "tgraph_train": "torch.compile(backend='tgraph_train')", "cpp": "tgraph C++ API"}[path]
            try:
                r = (measure_cpp(a.cpp, batch, prec, a.iters, a.curve) if path == "cpp"
                     else measure_torch(path, base, x, y, prec, a.iters, a.curve))
            except Exception as e:  # a failed path is a row with its error, not a lost table
                r = {"error": f"{type(e).__name__}: {e}"[:300]}
            r.update(path=label, precision=prec, batch=batch)
            rows.append(r)
            print(json.dumps(r), flush=True)
            # the compiled paths' graphs (and tgraph's graph memory) go before the next row
            torch._dynamo.reset()
            gc.collect()
            torch.cuda.empty_cache()
    print("\n| precision, batch | path | step (ms) | images/s | vs eager | vs inductor | synced step (ms) | first step (s) | peak (GiB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['precision']}, {r['batch']} | {r['path']} | failed: {r['error']} ||||||")
            continue
        ref = {q["path"]: q for q in rows if q["precision"] == r["precision"] and "error" not in q}
        ratio = lambda name: (f"{r['images_per_s'] / ref[name]['images_per_s']:.2f}x" if name in ref else "-")
        print(f"| {r['precision']}, {r['batch']} | {r['path']} | {r['step_ms']:.1f} | {r['images_per_s']:.0f} | "
              f"{ratio('PyTorch eager')} | {ratio('torch.compile (inductor)')} | {r.get('synced_ms', 0):.1f} | "
              f"{r['first_step_s']:.1f} | "
              f"{'n/a' if r['peak_gib'] is None else format(r['peak_gib'], '.1f')} |")
    if a.curve:
        print("\nloss over the first steps (same weights and data for eager and tgraph_train):")
        for r in rows:
            if r.get("loss"):
                print(f"{r['precision']} {r['path']}: " + " ".join(f"{v:.4f}" for v in r["loss"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
