"""Keras ResNet-50 (keras.applications, weights=None) on the CPU: TensorFlow alone against
TensorFlow with the TGRAPH plugin (issue 24), one training step (model.train_on_batch, SGD) and
inference (model(x, training=False) in a tf.function), each in a process of its own, median of
the timed calls after warm-up.

    python3 bench/tf_resnet50.py [--batch 8] [--size 96] [--steps 5]

Needs build/python/tensorflow/libtgraph_tensorflow.so and TensorFlow in .deps/tflib (make build).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(device: str, batch: int, size: int, steps: int) -> dict:
    import numpy as np
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    x = np.random.RandomState(0).rand(batch, size, size, 3).astype("float32")
    y = np.arange(batch) % 10
    with tf.device(device):
        m = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=10)
        # jit_compile=False: what Keras's "auto" gives TensorFlow alone on a CPU-only machine. With
        # the plugin, "auto" sees a non-CPU device and asks XLA, which has no TGRAPH device: fit
        # works (the plugin's optimizer clears the request inside the graph), train_on_batch
        # does not ("No JIT device registered for TGRAPH": the eager call itself asks for XLA).
        m.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
        t0 = time.perf_counter()
        first = float(m.train_on_batch(x, y))
        first_s = time.perf_counter() - t0
        train = []
        for _ in range(steps):
            t = time.perf_counter()
            m.train_on_batch(x, y)
            train.append(time.perf_counter() - t)
        infer_fn = tf.function(lambda v: m(v, training=False))
        infer_fn(x)
        infer = []
        for _ in range(steps):
            t = time.perf_counter()
            np.asarray(infer_fn(x))
            infer.append(time.perf_counter() - t)
    return {"first_step_s": first_s, "first_loss": first, "train_ms": statistics.median(train) * 1e3,
            "infer_ms": statistics.median(infer) * 1e3}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--child", choices=["tf", "tgraph"])
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child("/TGRAPH:0" if a.child == "tgraph" else "/CPU:0", a.batch, a.size, a.steps)))
        return
    plugin = ROOT / "build/python/tensorflow/libtgraph_tensorflow.so"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = str(ROOT / ".deps/tflib") + os.pathsep + env.get("PYTHONPATH", "")
    rows = {}
    for name in ("tf", "tgraph"):
        e = dict(env)
        if name == "tgraph":
            e["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"] = str(plugin)
        out = subprocess.run([sys.executable, __file__, "--child", name, "--batch", str(a.batch), "--size",
                              str(a.size), "--steps", str(a.steps)], env=e, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stderr[-3000:])
        rows[name] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"Keras ResNet-50, CPU, batch {a.batch}, {a.size}x{a.size}, median of {a.steps}")
    print("| path | training step (ms) | inference (ms) | first step (s) | first loss |")
    print("|---|---|---|---|---|")
    for name, label in (("tf", "TensorFlow alone"), ("tgraph", "TensorFlow + tgraph (clusters)")):
        r = rows[name]
        print(f"| {label} | {r['train_ms']:.1f} | {r['infer_ms']:.1f} | {r['first_step_s']:.1f} | {r['first_loss']:.5f} |")


if __name__ == "__main__":
    main()
