"""One training step (forward, backward, SGD) through torch.compile(backend="tgraph_train")
against PyTorch eager, same process. GPU: torchvision ResNet-50, batch 32, 224x224, TF32 allowed
(the backend then compiles in tf32). --cpu: ResNet-18, batch 16, 64x64 on the CPU. Median wall
time of a (synchronised) step after warm-up.
Usage: PYTHONPATH=<build>/python python3 bench/torch_train_bench.py [--cpu]"""
import copy
import sys
import time

import torch
import torchvision

import tgraph.torch  # noqa: F401  (registers the backends)
from wall_timing import median_seconds


def step_ms(model, run, x, y, iters=30, warm=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        loss = torch.nn.functional.cross_entropy(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return median_seconds(step, iters, warm, torch.cuda.synchronize if x.is_cuda else None) * 1e3


def main():
    cpu = "--cpu" in sys.argv
    torch.manual_seed(0)
    if cpu:
        label = "ResNet-18 train step, batch 16, 64x64, CPU"
        base = torchvision.models.resnet18(num_classes=10).train()
        x, y = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        label = "ResNet-50 train step, batch 32, 224x224"
        base = torchvision.models.resnet50(num_classes=1000).cuda().train()
        x = torch.randn(32, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (32,), device="cuda")
    eager = copy.deepcopy(base)
    print(f"{label}: PyTorch eager: {step_ms(eager, eager, x, y):.2f} ms", flush=True)
    mine = copy.deepcopy(base)
    t0 = time.perf_counter()
    run = torch.compile(mine, backend="tgraph_train", dynamic=False)
    ms = step_ms(mine, run, x, y)
    print(f"{label}: tgraph_train: {ms:.2f} ms (warm-up with compiles: {time.perf_counter() - t0:.1f} s)",
          flush=True)


if __name__ == "__main__":
    main()
