"""One executable for every size (issue 22): BERT-base (f16) through
tgraph.torch.compile(model, dynamic=True) on the GPU, run at several batch sizes and sequence
lengths, against an executable specialised to each size (tgraph.torch.compile without dynamic)
and eager PyTorch, in one process. Per size: the dynamic executable's first call there (its
op-by-op run: kernels for the new shapes, library plans) and its steady call (median, CUDA
graph per size), the specialised one's steady call, and how many executables were compiled.
On the GPU machine:  python3 bench/dynamic_sizes.py [--batches 16,1,64] [--seqs 16,64,128,512]
                     python3 bench/dynamic_sizes.py --model resnet50 --batches 1,32,256 --seqs 224
--first-calls: only the dynamic executable's first and second call per size, each against eager
(no specialised compile per size: many sizes in little time). --sizes 16x16,16x128,1x128 gives
(batch, length) pairs in that order instead of every batch with every length. TGRAPH_PROFILE=first
adds a profile per size. A fresh TGRAPH_CACHE_DIR measures a machine that never compiled the
sizes' kernels (cuDNN's own caches aside)."""
import argparse
import time

import torch
import transformers

import tgraph.torch as tt
from wall_timing import cuda_event_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="16,1,64")
    ap.add_argument("--seqs", default="16,64,128,512", help="sequence lengths (BERT) or image sizes (ResNet-50)")
    ap.add_argument("--model", default="bert", choices=["bert", "resnet50"])
    ap.add_argument("--first-calls", action="store_true", help="first and second calls only, against eager")
    ap.add_argument("--sizes", default="", help="batch x length pairs in order, e.g. 16x16,16x128,1x128")
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.model == "bert":
        model = transformers.BertModel(transformers.BertConfig()).eval().cuda().half()
        make = lambda b, s: torch.randint(0, 30000, (b, s), device="cuda")  # noqa: E731
    else:
        import torchvision
        model = torchvision.models.resnet50().eval().cuda().to(memory_format=torch.channels_last).half()
        make = lambda b, s: torch.randn(b, 3, s, s, device="cuda", dtype=torch.half).contiguous(  # noqa: E731
            memory_format=torch.channels_last)
    first_out = (lambda o: o.last_hidden_state) if a.model == "bert" else (lambda o: o)
    dynamic = tt.compile(model, dynamic=True)
    sizes = ([tuple(map(int, p.split("x"))) for p in a.sizes.split(",")] if a.sizes else
             [(b, s) for b in map(int, a.batches.split(",")) for s in map(int, a.seqs.split(","))])
    if a.first_calls:
        return first_calls(model, dynamic, make, first_out, sizes)
    rows = []
    with torch.no_grad():
        for b, s in sizes:
            ids = make(b, s)
            got, first, made = timed_call(dynamic, first_out, ids)
            dyn = cuda_event_ms(lambda: dynamic(ids), iters=20, warmup=1)
            static = tt.compile(model)
            want = first_out(static(ids))
            # Both tgraph executables against eager PyTorch (the same dtype): a wrong kernel
            # shared by both would hide behind their difference alone.
            peer = first_out(model(ids)).float()
            err = max(float((got.float() - peer).abs().max()), float((want.float() - peer).abs().max()))
            fixed = cuda_event_ms(lambda: static(ids), iters=20, warmup=1)
            eager = cuda_event_ms(lambda: model(ids), iters=20, warmup=1)
            rows.append((b, s, first, made, dyn, fixed, eager, err))
            print(f"batch {b} seq {s}: dynamic first call {first:.0f} ms ({made} compiled), "
                  f"steady {dyn:.3f} ms; specialised {fixed:.3f} ms; eager {eager:.3f} ms; max diff from eager {err:.3g}",
                  flush=True)
    print("\n| batch | seq | dynamic: first call at the size | dynamic: steady | specialised | ratio | eager | max diff from eager |")
    print("|---|---|---|---|---|---|---|---|")
    for b, s, first, made, dyn, fixed, eager, err in rows:
        print(f"| {b} | {s} | {first:.0f} ms{' (compiled)' if made else ''} | {dyn:.3f} ms | {fixed:.3f} ms | "
              f"{dyn / fixed:.2f} | {eager:.3f} ms | {err:.3g} |")
    print(f"\nexecutables compiled by the dynamic module: {sum(r[3] for r in rows)} for {len(rows)} sizes")


def timed_call(f, first_out, x):
    """f(x)'s output, its host time to completion in ms, and how many executables it compiled."""
    n0 = tt.stats()["executables"]
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = first_out(f(x))
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t) * 1e3, tt.stats()["executables"] - n0


def first_calls(model, dynamic, make, first_out, sizes):
    import os
    import tgraph
    rows = []
    with torch.no_grad():
        for b, s in sizes:
            x = make(b, s)
            got, first, made = timed_call(dynamic, first_out, x)
            if os.environ.get("TGRAPH_PROFILE"):
                tgraph._tgraph._profile_flush(f"first call {b} x {s}")
            again, second, _ = timed_call(dynamic, first_out, x)
            peer = first_out(model(x)).float()
            err = max(float((got.float() - peer).abs().max()), float((again.float() - peer).abs().max()))
            rows.append((b, s, first, second, made, err))
            print(f"batch {b} x {s}: first call {first:.0f} ms ({made} compiled), second {second:.0f} ms, "
                  f"max diff from eager {err:.3g}", flush=True)
    print("\n| batch | size | first call | second call | max diff from eager |")
    print("|---|---|---|---|---|")
    for b, s, first, second, made, err in rows:
        print(f"| {b} | {s} | {first:.0f} ms{' (compiled)' if made else ''} | {second:.0f} ms | {err:.3g} |")


if __name__ == "__main__":
    main()
