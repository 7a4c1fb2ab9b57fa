"""PyTorch peer of examples/train_fashion_mnist: the same model (small ResNet, NHWC semantics
via channels_last), the same batch size and optimizer, timed per epoch with the same number of
threads (CPU) or on the GPU (the data kept on the device, timing synchronised).
Usage: python3 bench/train_fashion_mnist_torch.py [epochs] [threads] [cpu|cuda] [data dir]"""
import gzip
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def cb(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.b1a, self.b1b = cb(1, 32), cb(32, 32), cb(32, 32)
        self.down, self.b2a, self.b2b = cb(32, 64, 2), cb(64, 64), cb(64, 64)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(x + self.b1b(F.relu(self.b1a(x))))
        x = F.relu(self.down(x))
        x = F.relu(x + self.b2b(F.relu(self.b2a(x))))
        return self.fc(x.mean((2, 3)))


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    data = sys.argv[4] if len(sys.argv) > 4 else DATA
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    xs = (torch.tensor(idx(f"{data}/train-images-idx3-ubyte.gz"), dtype=torch.float32) / 255 - 0.2860) / 0.3530
    ys = torch.tensor(idx(f"{data}/train-labels-idx1-ubyte.gz"), dtype=torch.long)
    tx = (torch.tensor(idx(f"{data}/t10k-images-idx3-ubyte.gz"), dtype=torch.float32) / 255 - 0.2860) / 0.3530
    ty = torch.tensor(idx(f"{data}/t10k-labels-idx1-ubyte.gz"), dtype=torch.long)
    xs, tx = xs[:, None].to(device), tx[:, None].to(device)
    ys, ty = ys.to(device), ty.to(device)
    model = Net().to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    b = 128
    steps = len(xs) // b
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(len(xs), device=device)
        sync()
        t0 = time.perf_counter()
        for s in range(steps):
            i = perm[s * b:(s + 1) * b]
            loss = F.cross_entropy(model(xs[i].contiguous(memory_format=torch.channels_last)), ys[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sync()
        secs = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            acc = (model(tx).argmax(1) == ty).float().mean().item()
        print(f"torch epoch {epoch}: {secs:.1f} s ({steps * b / secs:.0f} img/s), test accuracy {100 * acc:.2f}%")


if __name__ == "__main__":
    main()
