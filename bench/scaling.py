"""Data-parallel ResNet training on N GPUs against one (issue 28): tgraph's C++ step
(bench_train_resnet --distributed: gradients averaged in buckets inside the captured step,
through NCCL) beside PyTorch's DistributedDataParallel (NCCL), in one command. Each process
trains on --batch images per step (as DDP's per-process batch), random data, SGD momentum 0.9,
cross-entropy, bf16 autocast and channels_last for PyTorch (tgraph: precision bf16, NHWC).

Each row: the median step of rank 0 as training runs them (CUDA events between steps queued
back to back), images/s counting every rank's images, and the scaling efficiency: images/s on
N GPUs over N times images/s on one.

Usage (the GPU machine, NCCL_NVLS_ENABLE=0 is set here):
  PYTHONPATH=build-gpu/python python3 bench/scaling.py --gpus 2 [--batch 256] [--precision bf16]
      [--model resnet50] [--iters 20] [--binary build-gpu/bench/bench_train_resnet] [--paths tgraph,ddp]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def tgraph_row(binary, gpus, a):
    """bench_train_resnet on one GPU, or on `gpus` ranks through tgraph's launcher: rank 0's line."""
    cmd = [binary, "--batch", str(a.batch), "--precision", a.precision, "--model", a.model, "--iters", str(a.iters)]
    if gpus > 1:
        cmd = [sys.executable, "-m", "tgraph.distributed", "--nproc", str(gpus)] + cmd + ["--distributed"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, NCCL_NVLS_ENABLE="0"))
    lines = [x for x in r.stdout.splitlines() if '"path": "tgraph C++ API"' in x]
    if r.returncode != 0 or not lines:
        raise SystemExit(f"tgraph on {gpus} GPU(s) failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    line = lines[-1][lines[-1].index("{"):]  # the launcher may prefix a rank's lines
    got = json.loads(line)
    return got["step_ms"], got["images_per_s"]


DDP_RANK = r'''
import json, os, sys, torch, torch.distributed as dist, torchvision
from train_models import steady_step_ms, train_step  # bench/: the single-GPU rows' step and timing
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
batch, iters, model_name, bf16 = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "bf16"
torch.cuda.set_device(rank)
if world > 1:
    dist.init_process_group("nccl", init_method="file://" + os.environ["STORE"], rank=rank, world_size=world)
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
model = getattr(torchvision.models, model_name)().cuda().to(memory_format=torch.channels_last)
net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank]) if world > 1 else model
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device="cuda")
ms = steady_step_ms(train_step(model, net, opt, x, y, bf16), iters)
if rank == 0:
    print("RESULT " + json.dumps({"step_ms": ms, "images_per_s": batch * world / ms * 1e3}), flush=True)
if world > 1:
    dist.destroy_process_group()
'''


def ddp_row(gpus, a):
    """PyTorch on one GPU (no DDP wrapper) or DDP on `gpus` processes: rank 0's step."""
    with tempfile.TemporaryDirectory() as d:
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, WORLD_SIZE=str(gpus), STORE=os.path.join(d, "store"), NCCL_NVLS_ENABLE="0",
                   PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p))
        args = [str(a.batch), str(a.iters), a.model, a.precision]
        procs = [subprocess.Popen([sys.executable, "-c", DDP_RANK] + args, env=dict(env, RANK=str(r)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(gpus)]
        outs = [p.communicate() for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("PyTorch on %d GPU(s) failed:\n%s" % (gpus, "\n".join(e[-2000:] for _, e in outs)))
    line = next(x for x in outs[0][0].splitlines() if x.startswith("RESULT "))
    got = json.loads(line[7:])
    return got["step_ms"], got["images_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "tf32"])
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "resnet18"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--binary", default="build-gpu/bench/bench_train_resnet")
    ap.add_argument("--paths", default="tgraph,ddp")
    a = ap.parse_args()
    import torch
    if torch.cuda.device_count() < a.gpus:
        raise SystemExit(f"{a.gpus} GPUs asked for, {torch.cuda.device_count()} present")
    rows = []
    for path in a.paths.split(","):
        one = tgraph_row(a.binary, 1, a) if path == "tgraph" else ddp_row(1, a)
        many = tgraph_row(a.binary, a.gpus, a) if path == "tgraph" else ddp_row(a.gpus, a)
        eff = many[1] / (a.gpus * one[1])
        rows.append((path, one, many, eff))
        print(f"{path}: 1 GPU {one[0]:.2f} ms, {one[1]:.0f} images/s; {a.gpus} GPUs {many[0]:.2f} ms, "
              f"{many[1]:.0f} images/s; scaling efficiency {eff:.1%}", flush=True)
    print(f"\n{a.model} {a.precision}, batch {a.batch} per GPU, median of {a.iters} steps (rank 0)")
    print(f"| path | 1 GPU | {a.gpus} GPUs | efficiency |")
    print("|---|---|---|---|")
    for path, one, many, eff in rows:
        name = "tgraph C++ (NCCL in the step)" if path == "tgraph" else "PyTorch DDP (NCCL)"
        print(f"| {name} | {one[1]:.0f} images/s ({one[0]:.2f} ms) | {many[1]:.0f} images/s ({many[0]:.2f} ms) | {eff:.1%} |")


if __name__ == "__main__":
    main()
