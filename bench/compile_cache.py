"""tgraph.torch.compile of a model seen before (issue 22): the first call in a fresh process
with an empty disk cache (torch.export, conversion, compile, first run), then in a second
process with the cache that left (the executable loaded instead), then in a third with the
generated kernels' cache deleted (the .tgx carries their cubins), and last the cached .tgx
alone: Executable.load and its first run, timed, in a fresh process without a kernel cache.
Hugging Face BERT-base (random weights, eval), batch 1 x 128, or torchvision ResNet-50, batch
1, on the CPU or `--device cuda`, in f32 or `--precision f16|bf16` (tgraph.torch.compile's):
  python3 bench/compile_cache.py [--device cpu] [--model bert|resnet50] [--precision f32]
Each first call is split into its phases: torch.export, conversion to a tgraph graph, tgraph's
compile, the first run (kernels generated, library plans chosen, capture), or the cache's load."""
import argparse
import os
import subprocess
import sys
import tempfile
import time

CHILD = """
import time, torch
t0 = time.perf_counter()
import tgraph.torch as tgt
dev = {device!r}
if {model!r} == "bert":
    import transformers
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval().to(dev)
    args = (torch.randint(0, 30000, (1, 128), device=dev),)
else:
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval().to(dev)
    args = (torch.randn(1, 3, 224, 224, device=dev),)
phases = {{}}

def timed(name, f):
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            if dev == "cuda":
                torch.cuda.synchronize()
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - t
    return g

torch.export.export = timed("export", torch.export.export)
torch.export.ExportedProgram.run_decompositions = timed("decompositions", torch.export.ExportedProgram.run_decompositions)
tgt.convert = timed("convert", tgt.convert)
tgt._executable = timed("compile", tgt._executable)
tgt._torch_cache.load = timed("cache load", tgt._torch_cache.load)
tgt._torch_cache.key = timed("cache key", tgt._torch_cache.key)
tgt._torch_cache.store_later = timed("cache store queued", tgt._torch_cache.store_later)
tgt._torch_cache.store = timed("cache store (its thread, after)", tgt._torch_cache.store)
tgt._Compiled.__call__ = timed("first run", tgt._Compiled.__call__)
t1 = time.perf_counter()
fast = tgt.compile(model, precision={precision!r})
with torch.no_grad():
    out = fast(*args)
    if dev == "cuda":
        torch.cuda.synchronize()
t2 = time.perf_counter()
tgt._torch_cache.wait()
s = tgt.stats()
split = ", ".join(f"{{k}} {{v:.2f}}" for k, v in phases.items())
print(f"model built {{t1 - t0:.2f}} s; compile + first call {{t2 - t1:.2f}} s ({{split}}; "
      f"compiled {{s['executables']}}, from the cache {{s['cache_hits']}})")
"""

# The cached .tgx alone, loaded where tgraph.torch loads it: in a process that has imported torch
# (whose wheel brings its own cuBLASLt and cuDNN; a process without them has other library
# versions, so the file's saved algorithms would rightly not be trusted there).
LOAD = """
import glob, json, sys, time
t0 = time.perf_counter()
import numpy as np
import torch
import tgraph as tg
t1 = time.perf_counter()
path = sorted(glob.glob(sys.argv[1] + "/torch/*.tgx"))[0]
exe = tg.Executable.load(path)
ins = [np.zeros([d if d > 0 else 1 for d in t.shape], dtype=tg.numpy_dtype(t.dtype)) for t in exe.input_types]
t2 = time.perf_counter()
exe.run(ins)
t3 = time.perf_counter()
s = exe.run_stats
print(f"import {{t1 - t0:.2f}} s; load {{(t2 - t1) * 1e3:.0f}} ms, first run {{(t3 - t2) * 1e3:.0f}} ms "
      f"(kernels compiled {{s['kernels_compiled']}}, from the file {{s['kernels_from_file']}})")
"""


def drop_kernel_cache(d):
    """Deletes the generated kernels' cubins of cache dir d (the compile cache under d/torch stays)."""
    for f in os.listdir(d):
        if f.endswith(".cubin"):
            os.remove(os.path.join(d, f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="bert")
    ap.add_argument("--precision", default="f32")
    ap.add_argument("--profile-load", action="store_true",
                    help="also run the .tgx alone under TGRAPH_PROFILE=first and print where its load and first run go")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TGRAPH_CACHE_DIR=d)
        env.pop("TGRAPH_NO_COMPILE_CACHE", None)
        for label in ("empty cache", "second process", "no kernel cache"):
            if label == "no kernel cache":
                drop_kernel_cache(d)
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", CHILD.format(device=a.device, model=a.model, precision=a.precision)], env=env,
                               capture_output=True, text=True)
            line = (r.stdout.strip().splitlines() or [r.stderr.strip()[-300:]])[-1]
            print(f"{a.model} {a.precision} on {a.device}, {label}: {line} (process {time.perf_counter() - t:.1f} s)", flush=True)
        drop_kernel_cache(d)
        r = subprocess.run([sys.executable, "-c", LOAD.format(), d], env=env, capture_output=True, text=True)
        line = (r.stdout.strip().splitlines() or [r.stderr.strip()[-300:]])[-1]
        print(f"{a.model} on {a.device}, the cached .tgx alone: {line}", flush=True)
        if a.profile_load:
            drop_kernel_cache(d)
            r = subprocess.run([sys.executable, "-c", LOAD.format(), d], env=dict(env, TGRAPH_PROFILE="first"),
                               capture_output=True, text=True)
            print(f"{a.model} on {a.device}, the cached .tgx alone under TGRAPH_PROFILE=first: {r.stdout.strip()}")
            print(r.stderr.strip()[-4000:], flush=True)


if __name__ == "__main__":
    main()
