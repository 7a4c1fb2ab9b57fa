"""Unchanged PyTorch models through tgraph.torch.compile against PyTorch eager and torch.compile
(inductor) in the same process on the GPU. Each figure: median wall time of one synchronised
forward call (after warm-up; the call includes tgraph's DLPack exchange). Random weights.
--cpu: the same models at batch 1 on the CPU, f32 (eager, inductor and tgraph in the same process).
Usage: PYTHONPATH=<build>/python python3 bench/torch_frontend_bench.py [--cpu] [--no-inductor]"""
import sys
import time

import torch

import tgraph.torch as tgt
from wall_timing import median_seconds


CPU = "--cpu" in sys.argv
DEV = "cpu" if CPU else "cuda"


def sync():
    if not CPU:
        torch.cuda.synchronize()


def median_ms(fn, iters=50, warm=10):
    return median_seconds(fn, iters, warm, sync) * 1e3


def models():
    import torchvision
    import transformers
    b_rn, b_bert = (1, 1) if CPU else (32, 8)
    rn = torchvision.models.resnet50().to(DEV).eval()
    yield f"ResNet-50, batch {b_rn}, 224x224", rn, (torch.randn(b_rn, 3, 224, 224, device=DEV),)
    cfg = transformers.BertConfig()  # BERT-base: 12 layers, hidden 768
    bert = transformers.BertModel(cfg).to(DEV).eval()
    yield f"BERT-base, batch {b_bert}, seq 128", bert, (torch.randint(0, cfg.vocab_size, (b_bert, 128), device=DEV),)


def first(out):
    return out if isinstance(out, torch.Tensor) else out[0]


def main():
    inductor = "--no-inductor" not in sys.argv
    torch.backends.cuda.matmul.allow_tf32 = True  # the tf32 rows: every system may use TF32
    torch.backends.cudnn.allow_tf32 = True
    prec = "f32" if CPU else "tf32"
    for name, model, args in models():
        with torch.no_grad():
            ref = first(model(*args)).float()
            rows = [(f"PyTorch eager ({prec})", lambda: model(*args))]
            fast = tgt.compile(model, precision=prec)
            t0 = time.perf_counter()
            got = first(fast(*args)).float()
            compile_s = time.perf_counter() - t0
            err = float((got - ref).abs().max() / ref.abs().max())
            rows.append((f"tgraph.torch.compile {prec} (compile {compile_s:.1f} s, max rel. diff {err:.1e})",
                         lambda: fast(*args)))
            if not CPU:
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
                rows.append((f"torch.compile inductor {prec} (compile {time.perf_counter() - t0:.1f} s)",
                             lambda: ind(*args)))
            for label, fn in rows:
                print(f"{name}: {label}: {median_ms(fn, iters=20 if CPU else 50, warm=3 if CPU else 10):.3f} ms",
                      flush=True)


if __name__ == "__main__":
    main()
