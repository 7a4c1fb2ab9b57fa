"""One inference row of bench/infer_models.py through tgraph alone, for looking inside it:
run under TGRAPH_PROFILE=1 (time per op kind, uncaptured) or TGRAPH_LOG_FALLBACK=1 (what was
decomposed or fell back, and why), or under Nsight Compute.

  TGRAPH_PROFILE=1 python3 bench/infer_profile.py bert-b8-s512-f16 [--iters 20]
Prints the captured call's median (CUDA events) and the tgraph executable's run_stats."""
import argparse

import torch

import tgraph as tg
import tgraph.torch  # noqa: F401
from infer_models import GPU_ROWS, Plain, build, inputs
from wall_timing import cuda_event_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("row", choices=[r[0] for r in GPU_ROWS])
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    _, kind, batch, size, dtype = next(r for r in GPU_ROWS if r[0] == a.row)
    model = Plain(build(kind)).cuda()
    x = inputs(kind, batch, size, "cuda")
    fast = tg.torch.compile(model, precision=dtype)
    with torch.no_grad():
        ms = cuda_event_ms(lambda: fast(x), iters=a.iters, warmup=3)
        want = model(x).float()
        got = fast(x).float()
    print(f"{a.row}: tgraph {ms:.3f} ms per call; max rel. diff to f32 eager "
          f"{float((got - want).abs().max() / want.abs().max()):.2e}")
    for c in fast._cache.values():
        exe = getattr(c, "exe", None)
        if exe is not None:
            print("run_stats:", exe.run_stats)


if __name__ == "__main__":
    main()
