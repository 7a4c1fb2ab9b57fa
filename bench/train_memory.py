"""Where the memory of a training step through torch.compile(backend="tgraph_train") goes, step
by step: torch's allocated bytes, tgraph's own (its pool and captured graphs: in use and peak
since the last step), and each compiled executable's run statistics (captures, replays,
op-by-op runs, instances held, recaptures because an input moved). On the GPU machine:
  python3 bench/train_memory.py [--batch 256] [--steps 6]
ResNet-50, bf16 autocast, SGD momentum, random data, as bench/train_models.py."""
import argparse

import torch
import torchvision

import tgraph
import tgraph.torch as tt


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
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda()
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (a.batch,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = torch.compile(model, backend="tgraph_train", dynamic=False)
    dev = tgraph.Device.cuda(0)
    gib = 2 ** -30

    def step():
        with torch.autocast("cuda", torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

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
