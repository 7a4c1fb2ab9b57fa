"""Where the memory of a training step through torch.compile(backend="tgraph_train") goes, step
by step: torch's allocated bytes, tgraph's own (its pool and captured graphs: in use and peak
since the last step), and each compiled executable's run statistics (captures, replays,
op-by-op runs, instances held, recaptures because an input moved). On the GPU machine:
  python3 bench/train_memory.py [--batch 256] [--steps 6]
ResNet-50, bf16 autocast, SGD momentum, random data, as bench/train_models.py."""
import argparse

import torch

import tgraph
import tgraph.torch as tt
from resnet_train_setup import resnet50_training


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--unsynced", type=int, default=0,
                    help="then N more steps queued without synchronising (as train_models' warm-up), "
                         "and the peak over them")
    a = ap.parse_args()
    made = []
    inner = tt._executable

    def recording(*args, **kwargs):
        c = inner(*args, **kwargs)
        made.append(c)
        return c
    tt._executable = recording
    step = resnet50_training(a.batch)[-1]
    dev = tgraph.Device.cuda(0)
    gib = 2 ** -30

    def executables():
        for i, c in enumerate(made):
            st = c.exe.run_stats  # a dict: captures, replays, uncaptured, instances, input_moves, ...
            print(f"    executable {i}: " + " ".join(f"{k} {v}" for k, v in st.items() if v not in ("", None)))

    for s in range(a.steps):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        dev.reset_peak_memory()
        loss = step()
        torch.cuda.synchronize()
        used, peak = dev.memory()
        print(f"step {s}: loss {float(loss.detach()):.4f}  torch {torch.cuda.memory_allocated() * gib:.2f} GiB "
              f"(peak {torch.cuda.max_memory_allocated() * gib:.2f})  tgraph {used * gib:.2f} GiB (peak {peak * gib:.2f})")
        executables()
    if a.unsynced:
        dev.reset_peak_memory()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(a.unsynced):
            step()
        torch.cuda.synchronize()
        used, peak = dev.memory()
        print(f"{a.unsynced} unsynced steps: torch peak {torch.cuda.max_memory_allocated() * gib:.2f} GiB, "
              f"tgraph {used * gib:.2f} GiB (peak {peak * gib:.2f})")
        executables()

if __name__ == "__main__":
    main()
