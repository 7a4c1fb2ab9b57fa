"""One executable for every size (issue 22): BERT-base (f16) through
tgraph.torch.compile(model, dynamic=True) on the GPU, run at several batch sizes and sequence
lengths, against an executable specialised to each size (tgraph.torch.compile without dynamic)
and eager PyTorch, in one process. Per size: the dynamic executable's first call there (its
op-by-op run: kernels for the new shapes, library plans) and its steady call (median, CUDA
graph per size), the specialised one's steady call, and how many executables were compiled.
On the GPU machine:  python3 bench/dynamic_sizes.py [--batches 16,1,64] [--seqs 16,64,128,512]"""
import argparse
import time

import torch
import transformers

import tgraph.torch as tt


def median_ms(fn, iters=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="16,1,64")
    ap.add_argument("--seqs", default="16,64,128,512")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval().cuda().half()
    dynamic = tt.compile(model, dynamic=True)
    rows = []
    with torch.no_grad():
        for b in map(int, a.batches.split(",")):
            for s in map(int, a.seqs.split(",")):
                ids = torch.randint(0, 30000, (b, s), device="cuda")
                n0 = tt.stats()["executables"]
                torch.cuda.synchronize()
                t = time.perf_counter()
                got = dynamic(ids).last_hidden_state
                torch.cuda.synchronize()
                first = (time.perf_counter() - t) * 1e3
                made = tt.stats()["executables"] - n0
                dyn = median_ms(lambda: dynamic(ids))
                static = tt.compile(model)
                want = static(ids).last_hidden_state
                err = float((got.float() - want.float()).abs().max())
                fixed = median_ms(lambda: static(ids))
                eager = median_ms(lambda: model(ids))
                rows.append((b, s, first, made, dyn, fixed, eager, err))
                print(f"batch {b} seq {s}: dynamic first call {first:.0f} ms ({made} compiled), "
                      f"steady {dyn:.3f} ms; specialised {fixed:.3f} ms; eager {eager:.3f} ms; max diff {err:.3g}",
                      flush=True)
    print("\n| batch | seq | dynamic: first call at the size | dynamic: steady | specialised | ratio | eager |")
    print("|---|---|---|---|---|---|---|")
    for b, s, first, made, dyn, fixed, eager, _ in rows:
        print(f"| {b} | {s} | {first:.0f} ms{' (compiled)' if made else ''} | {dyn:.3f} ms | {fixed:.3f} ms | "
              f"{dyn / fixed:.2f} | {eager:.3f} ms |")
    print(f"\nexecutables compiled by the dynamic module: {sum(r[3] for r in rows)} for {len(rows)} sizes")


if __name__ == "__main__":
    main()
