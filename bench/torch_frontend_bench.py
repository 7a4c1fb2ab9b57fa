"""Unchanged PyTorch models through tgraph.torch.compile against PyTorch eager and torch.compile
(inductor) in the same process on the GPU. Each figure: median wall time of one synchronised
forward call (after warm-up; the call includes tgraph's DLPack exchange). Random weights.
Usage: PYTHONPATH=<build>/python python3 bench/torch_frontend_bench.py [--no-inductor]"""
import statistics
import sys
import time

import torch

import tgraph.torch as tgt


def median_ms(fn, iters=50, warm=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def models():
    import torchvision
    import transformers
    rn = torchvision.models.resnet50().cuda().eval()
    yield "ResNet-50, batch 32, 224x224", rn, (torch.randn(32, 3, 224, 224, device="cuda"),)
    cfg = transformers.BertConfig()  # BERT-base: 12 layers, hidden 768
    bert = transformers.BertModel(cfg).cuda().eval()
    yield "BERT-base, batch 8, seq 128", bert, (torch.randint(0, cfg.vocab_size, (8, 128), device="cuda"),)


def first(out):
    return out if isinstance(out, torch.Tensor) else out[0]


def main():
    inductor = "--no-inductor" not in sys.argv
    torch.backends.cuda.matmul.allow_tf32 = True  # the tf32 rows: every system may use TF32
    torch.backends.cudnn.allow_tf32 = True
    for name, model, args in models():
        with torch.no_grad():
            ref = first(model(*args)).float()
            rows = [("PyTorch eager (tf32)", lambda: model(*args))]
            fast = tgt.compile(model, precision="tf32")
            t0 = time.perf_counter()
            got = first(fast(*args)).float()
            compile_s = time.perf_counter() - t0
            err = float((got - ref).abs().max() / ref.abs().max())
            rows.append((f"tgraph.torch.compile tf32 (compile {compile_s:.1f} s, max rel. diff {err:.1e})",
                         lambda: fast(*args)))
            fast16 = tgt.compile(model, precision="bf16")
            fast16(*args)
            rows.append(("tgraph.torch.compile bf16", lambda: fast16(*args)))

            def eager16():
                with torch.autocast("cuda", torch.bfloat16):
                    return model(*args)
            rows.append(("PyTorch eager bf16 autocast", eager16))
            if inductor:
                t0 = time.perf_counter()
                ind = torch.compile(model)
                ind(*args)
                rows.append((f"torch.compile inductor tf32 (compile {time.perf_counter() - t0:.1f} s)",
                             lambda: ind(*args)))
            for label, fn in rows:
                print(f"{name}: {label}: {median_ms(fn):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
