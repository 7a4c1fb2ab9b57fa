"""Inference of whole models against PyTorch and ONNX Runtime (issue 21), one command:

  python3 bench/infer_models.py [--device cuda|cpu|all] [--rows NAMES] [--iters 50]

GPU rows (one process, interleaved rounds, CUDA-event medians): unchanged torchvision
ResNet-50 and transformers BertModel (BERT-base, default config), random weights, eval mode.
PyTorch eager runs under torch.autocast in the row's dtype (ResNet-50 channels_last);
torch.compile in its default mode (reduce-overhead at batch 1) under the same autocast; tgraph
is tgraph.torch.compile(model, precision=dtype) on the f32 model. Per row: each path's median,
tgraph against torch.compile, first call (compile + kernels + first run), peak GPU memory (torch:
max_memory_allocated over its own calls; tgraph: its pool and captured graphs), and the largest
difference of tgraph's output from eager's relative to eager's largest value.

CPU rows (2 threads): the same models exported to ONNX (opset 17; ResNet-50 with trained-looking
batch-norm statistics so its convolutions carry biases), tgraph's ONNX path against ONNX
Runtime, batch 1, f32, median of --cpu-iters after warm-up; plus PyTorch eager.
Nothing is downloaded; needs torch, torchvision, transformers, onnx, onnxruntime."""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import torch

import tgraph as tg
import tgraph.torch  # noqa: F401  (tg.torch.compile)
from onnx_real_models import trained_batch_norm
from wall_timing import cuda_event_ms, median_seconds

GPU_ROWS = [  # name, model, batch, seq (BERT) / image size, dtype
    ("resnet50-b1-bf16", "resnet50", 1, 224, "bf16"),
    ("resnet50-b256-bf16", "resnet50", 256, 224, "bf16"),
    ("bert-b1-s128-f16", "bert", 1, 128, "f16"),
    ("bert-b32-s128-f16", "bert", 32, 128, "f16"),
    ("bert-b8-s512-f16", "bert", 8, 512, "f16"),
]
TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def build(kind):
    torch.manual_seed(0)
    if kind == "resnet50":
        import torchvision
        return trained_batch_norm(torchvision.models.resnet50(weights=None)).eval()
    import transformers
    cfg = transformers.BertConfig()
    try:
        return transformers.BertModel(cfg, add_pooling_layer=True, attn_implementation="eager").eval()
    except TypeError:
        return transformers.BertModel(cfg).eval()


class Plain(torch.nn.Module):
    """The model's main tensor output (BERT: last_hidden_state), for every path alike."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        y = self.m(x)
        return y if isinstance(y, torch.Tensor) else y[0]


def inputs(kind, batch, size, device):
    g = torch.Generator().manual_seed(1)
    if kind == "resnet50":
        return torch.randn(batch, 3, size, size, generator=g).to(device)
    return torch.randint(0, 30000, (batch, size), generator=g).to(device)


def gpu_row(name, kind, batch, size, dtype, iters):
    dt = TORCH_DTYPE[dtype]
    model = Plain(build(kind)).cuda()
    x = inputs(kind, batch, size, "cuda")
    if kind == "resnet50":
        model = model.to(memory_format=torch.channels_last)
        x_eager = x.contiguous(memory_format=torch.channels_last)
    else:
        x_eager = x
    paths, first, peak, out = {}, {}, {}, {}

    def eager():
        with torch.autocast("cuda", dt):
            return model(x_eager)

    mode = "reduce-overhead" if batch == 1 else "default"
    compiled = torch.compile(model, mode=mode)

    def inductor():
        with torch.autocast("cuda", dt):
            return compiled(x_eager)

    fast = tg.torch.compile(model, precision=dtype)

    def tgraph():
        return fast(x)

    with torch.no_grad():
        for label, fn in (("eager", eager), ("torch.compile", inductor), ("tgraph", tgraph)):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            tg.Device.cuda(0).reset_peak_memory()
            t = time.perf_counter()
            out[label] = fn().float()
            torch.cuda.synchronize()
            first[label] = time.perf_counter() - t
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            peak[label] = (tg.Device.cuda(0).memory()[1] if label == "tgraph"
                           else torch.cuda.max_memory_allocated())
            paths[label] = fn
        rounds = {k: [] for k in paths}
        for _ in range(3):  # interleaved rounds: the three paths see the same clocks
            for k, fn in paths.items():
                rounds[k].append(cuda_event_ms(fn, iters=max(5, iters // 3), warmup=0))
    ms = {k: statistics.median(v) for k, v in rounds.items()}
    err = float((out["tgraph"] - out["eager"]).abs().max() / out["eager"].abs().max())
    return dict(name=name, ms=ms, first=first, peak=peak, err=err, batch=batch)


def cpu_rows(iters):
    import onnxruntime as ort
    torch.set_num_threads(2)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for kind, size in (("resnet50", 224), ("bert", 128)):
            model = Plain(build(kind))
            x = inputs(kind, 1, size, "cpu")
            path = os.path.join(d, kind + ".onnx")
            with torch.no_grad():
                want = model(x).numpy()
                torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], opset_version=17,
                                  do_constant_folding=True, dynamo=False)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 2
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            feed = x.numpy()
            t = time.perf_counter()
            exe = tg.onnx.load(path).compile()
            got = np.asarray(exe.run([feed])[0])
            first = time.perf_counter() - t

            def timed(fn):
                return median_seconds(fn, iters, 3) * 1e3

            with torch.no_grad():
                t_tg = timed(lambda: exe.run([feed]))
                t_ort = timed(lambda: sess.run(None, {"x": feed}))
                t_eager = timed(lambda: model(x))
            err = float(np.abs(got - want).max() / np.abs(want).max())
            rows.append((kind, t_tg, t_ort, t_eager, first, err))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="all", choices=["all", "cuda", "cpu"])
    ap.add_argument("--rows", default=",".join(r[0] for r in GPU_ROWS))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--cpu-iters", type=int, default=20)
    a = ap.parse_args()
    if a.device in ("all", "cuda") and torch.cuda.is_available() and tg.Device.cuda_device_count() > 0:
        want = set(a.rows.split(","))
        res = [gpu_row(*r, a.iters) for r in GPU_ROWS if r[0] in want]
        print("| workload | PyTorch eager | torch.compile | tgraph | tgraph / torch.compile | first call (eager / compile / tgraph) | peak GiB (eager / compile / tgraph) | max rel. diff |")
        print("|---|---|---|---|---|---|---|---|")
        for r in res:
            ms, f, p = r["ms"], r["first"], r["peak"]
            extra = ""
            if r["batch"] > 1 and r["name"].startswith("resnet"):
                extra = f" ({r['batch'] / ms['tgraph'] * 1e3:,.0f} img/s)"
            print(f"| {r['name']} | {ms['eager']:.3f} ms | {ms['torch.compile']:.3f} ms | {ms['tgraph']:.3f} ms{extra} | "
                  f"{ms['tgraph'] / ms['torch.compile']:.2f}x | {f['eager']:.1f} / {f['torch.compile']:.1f} / "
                  f"{f['tgraph']:.1f} s | {p['eager'] / 2**30:.2f} / {p['torch.compile'] / 2**30:.2f} / "
                  f"{p['tgraph'] / 2**30:.2f} | {r['err']:.2e} |", flush=True)
    elif a.device == "cuda":
        print("no usable CUDA device: the GPU rows need one")
    if a.device in ("all", "cpu"):
        print("\n| CPU, batch 1, f32, 2 threads | tgraph (ONNX) | ONNX Runtime | PyTorch eager | tgraph / ORT | tgraph first call | max rel. diff vs eager |")
        print("|---|---|---|---|---|---|---|")
        for kind, t_tg, t_ort, t_eager, first, err in cpu_rows(a.cpu_iters):
            print(f"| {kind} | {t_tg:.1f} ms | {t_ort:.1f} ms | {t_eager:.1f} ms | {t_tg / t_ort:.2f}x | {first:.2f} s | {err:.2e} |",
                  flush=True)


if __name__ == "__main__":
    main()
