"""The bytes the CUDA backend's generated kernels would move for the two graphs that
torch.compile(backend="tgraph_train") hands tgraph (ResNet-50 forward and backward under bf16
autocast, unchanged torchvision code), planned on this machine without a GPU: the same report as
bench_fusion_traffic gives for tgraph's own C++ training step, so the two paths compare kernel
for kernel. The step itself runs on the CPU (tgraph's CPU backend, CPU autocast: the casts
land where CUDA autocast puts them for convolutions, matmuls and batch norm), at a small batch;
activation traffic scales with it.

Usage: PYTHONPATH=build/python python3 bench/torch_plan_traffic.py [--batch 16] [--top 15]
Compare: build/bench/bench_fusion_traffic --batch 16"""
import argparse

import torch
import torchvision

import tgraph as tg
import tgraph.torch as tgt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--precision", choices=["bf16", "tf32"], default="bf16",
                    help="bf16 autocast, or f32 throughout (the TF32 training row)")
    a = ap.parse_args()
    reports = []
    plain = tgt._executable

    def planned(g, feeds, outs, random, device, precision, free_layouts=False, nhwc_inputs=(), *rest):
        targets = [o for o in outs if isinstance(o, tg.Tensor)]
        opts = tg._options("cpu", precision, False, True, free_layouts)
        reports.append(g._cuda_plan_traffic(tg._feed_list(feeds), targets, [], opts, a.top))
        return plain(g, feeds, outs, random, device, precision, free_layouts, nhwc_inputs, *rest)

    tgt._executable = planned
    torch.manual_seed(0)
    model = torchvision.models.resnet50()
    run = torch.compile(model, backend="tgraph_train", dynamic=False)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 1000, (a.batch,))
    with torch.autocast("cpu", torch.bfloat16, enabled=a.precision == "bf16"):
        loss = torch.nn.functional.cross_entropy(run(x), y)
    loss.backward()
    for name, r in zip(("forward", "backward"), reports):
        print(f"ResNet-50 through tgraph_train, {name}, batch {a.batch}, {a.precision}: generated kernels of the CUDA plan")
        print(r)


if __name__ == "__main__":
    main()
