"""One training step (forward, backward, SGD) of torchvision ResNet-50 through
torch.compile(backend="tgraph_train") against PyTorch eager, same process, on the GPU. Median
wall time of a synchronised step after warm-up; tf32 allowed everywhere (tgraph compiles the
graphs AOTAutograd hands it in f32: cuDNN/cuBLASLt choose). Usage: PYTHONPATH=<build>/python
python3 bench/torch_train_bench.py"""
import copy
import statistics
import time

import torch
import torchvision

import tgraph.torch  # noqa: F401  (registers the backends)


def step_ms(model, run, x, y, iters=30, warm=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        loss = torch.nn.functional.cross_entropy(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def main():
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    base = torchvision.models.resnet50(num_classes=1000).cuda().train()
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")
    eager = copy.deepcopy(base)
    print(f"ResNet-50 train step, batch 32: PyTorch eager: {step_ms(eager, eager, x, y):.2f} ms", flush=True)
    mine = copy.deepcopy(base)
    t0 = time.perf_counter()
    run = torch.compile(mine, backend="tgraph_train", dynamic=False)
    ms = step_ms(mine, run, x, y)
    print(f"ResNet-50 train step, batch 32: tgraph_train: {ms:.2f} ms (first steps incl. compile: "
          f"{time.perf_counter() - t0:.1f} s total)", flush=True)


if __name__ == "__main__":
    main()
