"""Real models through tgraph's ONNX path (issue 10): ResNet-50 and BERT-base, CPU, f32.

Nothing is downloaded from a model hub: both models use random weights (fixed seed).
  1. builds torchvision ResNet-50 (weights=None) and transformers BertModel(BertConfig())
     (BERT-base), eval mode, and exports each to ONNX (opset 17, fixed shapes:
     ResNet-50 [1,3,224,224]; BERT batch 1, sequence 128, input_ids + attention_mask)
     into OUT_DIR (never commit the .onnx files)
  2. saves random inputs as .npy, runs `tgraph run --device cpu`, ONNX Runtime (CPU) and
     PyTorch on them, and checks max|tgraph - ref| / max|ref| <= 1e-4 against both
  3. times `tgraph bench --device cpu` and ONNX Runtime the same way (warm-up, then the
     median of N runs; 2 threads everywhere: OMP_NUM_THREADS=2 for tgraph, ORT intra-op
     threads = 2, torch.set_num_threads(2)) and prints the latencies side by side

Usage: python3 bench/onnx_real_models.py OUT_DIR [--tgraph ./build/tools/tgraph]
                                                [--warmup 5] [--iters 20] [--models resnet50,bert]
Needs: python3 -m pip install onnxruntime torchvision transformers onnx
"""
import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch

TOL = 1e-4
OPSET = 17


def export(model, args, path, input_names, output_names):
    """torch.onnx.export with the TorchScript exporter when available, else the dynamo one."""
    errors = []
    for dynamo in (False, True):
        try:
            torch.onnx.export(model, args, path, input_names=input_names,
                              output_names=output_names, opset_version=OPSET,
                              do_constant_folding=True, dynamo=dynamo)
            return "dynamo" if dynamo else "torchscript"
        except Exception as e:  # noqa: BLE001 - report and try the other exporter
            errors.append(f"dynamo={dynamo}: {type(e).__name__}: {e}")
    raise RuntimeError("torch.onnx.export failed:\n" + "\n".join(errors))


def trained_batch_norm(model):
    """Batch norm statistics and affine terms as a trained network has them (returns model): with
    the defaults (mean 0, variance 1, beta 0) an exporter folds every convolution's bias to
    exactly 0 and the bias adds vanish from the graph, which no real model allows."""
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                c = mod.num_features
                mod.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                mod.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                mod.bias.copy_(torch.randn(c, generator=g) * 0.1)
    return model


def build_resnet50():
    import torchvision
    torch.manual_seed(0)
    m = trained_batch_norm(torchvision.models.resnet50(weights=None).eval())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 3, 224, 224, generator=g)
    inputs = {"input": x.numpy()}
    return m, (x,), inputs, ["input"], ["logits"]


class BertWrap(torch.nn.Module):
    """BertModel returning plain tensors (last hidden state, pooled output)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        o = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return o.last_hidden_state, o.pooler_output


def build_bert():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    cfg = BertConfig()  # BERT-base: 12 layers, hidden 768, 12 heads, vocab 30522
    # eager attention exports to plain MatMul/Softmax ops (no SDPA custom paths)
    try:
        bert = BertModel(cfg, add_pooling_layer=True, attn_implementation="eager")
    except TypeError:
        cfg._attn_implementation = "eager"
        bert = BertModel(cfg, add_pooling_layer=True)
    m = BertWrap(bert.eval()).eval()
    g = torch.Generator().manual_seed(1)
    seq = 128
    ids = torch.randint(0, cfg.vocab_size, (1, seq), generator=g, dtype=torch.int64)
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[0, 100:] = 0  # some padding so the mask path is exercised
    inputs = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    return m, (ids, mask), inputs, ["input_ids", "attention_mask"], ["last_hidden_state",
                                                                      "pooler_output"]


BUILDERS = {"resnet50": build_resnet50, "bert": build_bert}


def rel_err(a, ref):
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if a.shape != ref.shape:
        return float("inf")
    denom = np.max(np.abs(ref))
    return float(np.max(np.abs(a - ref)) / (denom if denom > 0 else 1.0))


def run_cmd(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="2")  # tgraph's CPU backend: OpenMP + oneDNN
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def ort_session(path, threads=2):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def time_median(f, warmup, iters):
    for _ in range(warmup):
        f()
    t = []
    for _ in range(iters):
        a = time.perf_counter()
        f()
        t.append(time.perf_counter() - a)
    t.sort()
    return t[len(t) // 2], t[0]


def torch_cuda_ms(model, targs, warmup, iters):
    """PyTorch eager on the GPU (f32, TF32 off): median and min of CUDA-event times in ms."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m = model.cuda()
    args = [t.cuda() for t in targs]
    times = []
    with torch.no_grad():
        for i in range(warmup + iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            m(*args)
            e.record()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(s.elapsed_time(e))
    m.cpu()
    times.sort()
    return [times[len(times) // 2], times[0]]


def parse_bench(text):
    """Median latency in ms and compile time from `tgraph bench` output (best effort)."""
    def find(pat):
        m = re.search(pat, text, re.IGNORECASE)
        if not m:
            return None
        v, unit = float(m.group(1)), (m.group(2) or "ms").lower()
        return v * {"s": 1e3, "ms": 1.0, "us": 1e-3, "µs": 1e-3}.get(unit, 1.0)
    med = find(r"median[^0-9]*([0-9.]+)\s*(ms|us|µs|s)\b")
    m = re.search(r"median[^(]*\(min ([0-9.]+)", text)
    mn = float(m.group(1)) if m else None  # same unit as the median (ms)
    comp = find(r"compile[^0-9]*([0-9.]+)\s*(ms|us|µs|s)\b")
    return med, mn, comp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--tgraph", default="./build/tools/tgraph")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--device", default="cpu", help="device for tgraph run/bench: cpu or cuda")
    a = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(a.out_dir, exist_ok=True)

    acc_rows, lat_rows, failures = [], [], []
    for name in a.models.split(","):
        print(f"== {name}", flush=True)
        model, targs, inputs, in_names, out_names = BUILDERS[name]()
        path = os.path.join(a.out_dir, f"{name}.onnx")
        t0 = time.perf_counter()
        how = export(model, targs, path, in_names, out_names)
        print(f"  exported ({how} exporter, opset {OPSET}) in {time.perf_counter() - t0:.1f} s"
              f" -> {path}", flush=True)
        try:
            import onnx
            onnx.checker.check_model(path)
            ops = sorted({n.op_type for n in onnx.load(path).graph.node})
            print(f"  ops: {', '.join(ops)}")
        except ImportError:
            print("  (onnx package not installed: model not checked)")

        # references: PyTorch and ONNX Runtime
        with torch.no_grad():
            pt = model(*targs)
        pt = [pt] if isinstance(pt, torch.Tensor) else list(pt)
        pt = [t.numpy() for t in pt]
        try:
            sess = ort_session(path)
            ort_names = [o.name for o in sess.get_outputs()]
            feed = {i.name: inputs[i.name] for i in sess.get_inputs()}
            ort_out = sess.run(None, feed)
        except ImportError:  # e.g. on the GPU machine: compare with PyTorch and tgraph's CPU run
            print("  (onnxruntime not installed: the CPU reference is tgraph --device cpu)")
            sess = None
            ort_names = out_names
            feed = dict(inputs)
            ort_out = None

        # tgraph run
        case_dir = os.path.join(a.out_dir, name)
        os.makedirs(case_dir, exist_ok=True)
        feeds = []
        for k in feed:
            f = os.path.join(case_dir, f"{k}.npy")
            np.save(f, inputs[k])
            feeds += ["--input", f"{k}={f}"]
        if ort_out is None:  # reference: tgraph on the CPU (itself checked against ORT on the dev machine)
            ref_dir = os.path.join(case_dir, "ref_cpu")
            rc, so, se = run_cmd([a.tgraph, "run", path, "--output-dir", ref_dir, "--device", "cpu"] + feeds)
            if rc != 0:
                failures.append((name, "tgraph run --device cpu", (so + se).strip()))
                ort_out = [np.full_like(p_, np.nan) for p_ in pt]
            else:
                ort_out = [np.load(os.path.join(ref_dir, f"{on}.npy")) for on in out_names]
        cmd = [a.tgraph, "run", path, "--output-dir", os.path.join(case_dir, "out"),
               "--device", a.device] + feeds
        print("  " + " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        rc, so, se = run_cmd(cmd)
        print(f"  tgraph run: rc={rc} in {time.perf_counter() - t0:.1f} s", flush=True)
        if rc != 0:
            msg = (so + se).strip()
            failures.append((name, "tgraph run", msg))
            print("  FAILED:\n" + msg)
        for i, on in enumerate(ort_names):
            if rc != 0:
                acc_rows.append((name, on, None, None, "FAIL (run)"))
                continue
            f = os.path.join(case_dir, "out", f"{on}.npy")
            if not os.path.exists(f):
                acc_rows.append((name, on, None, None, "FAIL (no output)"))
                failures.append((name, "tgraph run", f"missing output {f}"))
                continue
            tg = np.load(f)
            e_ort = rel_err(tg, ort_out[i])
            e_pt = rel_err(tg, pt[i])
            ok = e_ort <= TOL and e_pt <= TOL
            acc_rows.append((name, f"{on} {list(tg.shape)}", e_ort, e_pt, "ok" if ok else "FAIL"))
            if not ok:
                failures.append((name, "accuracy", f"{on}: vs ORT {e_ort:.3g}, vs PyTorch "
                                 f"{e_pt:.3g} (tol {TOL})"))
        e_ort_pt = max(rel_err(o, p) for o, p in zip(ort_out, pt))
        print(f"  (ORT vs PyTorch max rel err: {e_ort_pt:.3g})")

        # latency: tgraph bench vs ORT vs PyTorch, same warm-up / iteration counts
        cmd = [a.tgraph, "bench", path, "--device", a.device, "--warmup", str(a.warmup),
               "--iters", str(a.iters)]
        print("  " + " ".join(cmd), flush=True)
        rc, so, se = run_cmd(cmd)
        shown = [ln.strip() for ln in (so + se).replace("\r", "\n").splitlines()
                 if ln.strip() and not re.match(r"\s*(warm-up|run) \d+/\d+", ln)]
        print("  " + "\n  ".join(shown), flush=True)
        tg_ms, tg_min, tg_comp = parse_bench(so + se) if rc == 0 else (None, None, None)
        if rc != 0:
            failures.append((name, "tgraph bench", (so + se).strip()))
        ort_ms = ([1e3 * v for v in time_median(lambda: sess.run(None, feed), a.warmup, a.iters)]
                  if sess is not None else [float("nan")] * 2)
        if a.device == "cuda" and torch.cuda.is_available():
            pt_ms = torch_cuda_ms(model, targs, a.warmup, a.iters)
        else:
            with torch.no_grad():
                pt_ms = [1e3 * v for v in time_median(lambda: model(*targs), a.warmup, a.iters)]
        lat_rows.append((name, (tg_ms, tg_min), tg_comp, ort_ms, pt_ms))
        del sess, model

    print("\nAccuracy (max |tgraph - ref| / max |ref|, f32, tol 1e-4):")
    print("| model | output | vs ONNX Runtime | vs PyTorch | |")
    print("| --- | --- | --- | --- | --- |")
    fmt = lambda v: "—" if v is None else f"{v:.2e}"  # noqa: E731
    for r in acc_rows:
        print(f"| {r[0]} | {r[1]} | {fmt(r[2])} | {fmt(r[3])} | {r[4]} |")
    print(f"\n{a.device.upper()} latency, batch 1, median (min) of {a.iters} runs after {a.warmup} warm-up,"
          f" 2 threads; load average at the end: {os.getloadavg()[0]:.2f}")
    print("| model | tgraph | tgraph compile | ONNX Runtime | PyTorch eager |"
          " tgraph / ORT (median, min) |")
    print("| --- | --- | --- | --- | --- | --- |")

    def ms(v):
        f = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
        return f"{f(v[0])} ms ({f(v[1])})"
    for n, tg, comp, o, p in lat_rows:
        ratio = "—" if tg[0] is None else f"{tg[0] / o[0]:.2f}x, " + (
            "—" if tg[1] is None else f"{tg[1] / o[1]:.2f}x")
        c = "—" if comp is None else f"{comp / 1e3:.2f} s"
        print(f"| {n} | {ms(tg)} | {c} | {ms(o)} | {ms(p)} | {ratio} |")
    if failures:
        print("\nFailures:")
        for n, what, msg in failures:
            print(f"- {n} ({what}): {msg}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
