"""tgraph.torch.compile of a model seen before (issue 22): the first call in a fresh process
with an empty disk cache (torch.export, conversion, compile, first run), then in a second
process with the cache that left (the executable loaded instead). Hugging Face BERT-base
(random weights, eval), batch 1 x 128, on the CPU or `--device cuda`:
  python3 bench/compile_cache.py [--device cpu] [--model bert|resnet50]"""
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
t1 = time.perf_counter()
fast = tgt.compile(model)
with torch.no_grad():
    out = fast(*args)
    if dev == "cuda":
        torch.cuda.synchronize()
t2 = time.perf_counter()
s = tgt.stats()
print(f"model built {{t1 - t0:.2f}} s; compile + first call {{t2 - t1:.2f}} s "
      f"(compiled {{s['executables']}}, from the cache {{s['cache_hits']}})")
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="bert")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TGRAPH_CACHE_DIR=d)
        env.pop("TGRAPH_NO_COMPILE_CACHE", None)
        for label in ("empty cache", "second process"):
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", CHILD.format(device=a.device, model=a.model)], env=env,
                               capture_output=True, text=True)
            line = (r.stdout.strip().splitlines() or [r.stderr.strip()[-300:]])[-1]
            print(f"{a.model} on {a.device}, {label}: {line} (process {time.perf_counter() - t:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
