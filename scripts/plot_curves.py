"""Plots the training loss and test accuracy written by train_fashion_mnist (metrics.csv)."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    steps, losses, epochs, accs, test_losses = [], [], [], [], []
    with open(src) as f:
        for row in csv.DictReader(f):
            if row["train_loss"]:
                steps.append(int(row["step"]))
                losses.append(float(row["train_loss"]))
            if row["test_accuracy"]:
                epochs.append(int(row["step"]))
                accs.append(100 * float(row["test_accuracy"]))
                test_losses.append(float(row["test_loss"]))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(steps, losses, label="train loss")
    a.plot(epochs, test_losses, "o-", label="test loss")
    a.set_xlabel("step")
    a.set_ylabel("cross entropy")
    a.legend()
    b.plot(epochs, accs, "o-", color="tab:green")
    b.set_xlabel("step")
    b.set_ylabel("test accuracy (%)")
    fig.suptitle("tgraph: Fashion-MNIST")
    fig.tight_layout()
    fig.savefig(dst, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
