"""tf.while_loop and tf.cond in a tf.function: TensorFlow alone against TensorFlow with the TGRAPH
plugin (where the loop and the conditional are rebuilt as tgraph's while_loop / if_else and run
in one executable), each path in a process of its own, CPU. Prints ms per call (median of 20)
and the result, which must agree.

    TGRAPH_TF_PLUGIN=build/python/tensorflow/libtgraph_tensorflow.so \\
    TGRAPH_TF_PYTHONPATH=.deps/tflib python3 bench/tf_control_flow.py [--trips 1000]
"""
import argparse
import os
import subprocess
import sys

CHILD = r'''
import json, statistics, sys, time, numpy as np, tensorflow as tf
trips = int(sys.argv[1])
w = tf.constant(np.random.RandomState(0).randn(16, 16).astype("float32") * 0.2)

@tf.function
def run(x):
    def body(i, y):
        y = tf.cond(tf.reduce_sum(y) > 0.0, lambda: tf.tanh(tf.matmul(y, w)), lambda: tf.sigmoid(y) - 0.4)
        return i + 1, y
    return tf.while_loop(lambda i, y: i < trips, body, [tf.constant(0), x])[1]

x = tf.constant(np.random.RandomState(1).randn(8, 16).astype("float32"))
run(x)
times = []
for _ in range(20):
    t = time.perf_counter()
    y = run(x).numpy()
    times.append((time.perf_counter() - t) * 1e3)
print("RESULT " + json.dumps({"ms": statistics.median(times), "sum": float(y.sum())}))
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trips", type=int, default=1000)
    a = ap.parse_args()
    plugin = os.environ.get("TGRAPH_TF_PLUGIN", "")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    extra = os.environ.get("TGRAPH_TF_PYTHONPATH", "")
    if extra:
        env["PYTHONPATH"] = extra + os.pathsep + env.get("PYTHONPATH", "")
    for name, lib in (("TensorFlow alone", None), ("TensorFlow + tgraph", plugin)):
        e = dict(env)
        e.pop("TF_PLUGGABLE_DEVICE_LIBRARY_PATH", None)
        if lib:
            e["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"] = lib
        p = subprocess.run([sys.executable, "-c", CHILD, str(a.trips)], env=e, capture_output=True, text=True)
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(f"{name}: failed\n{p.stderr[-2000:]}")
            continue
        import json
        r = json.loads(line[7:])
        print(f"{name:22} {r['ms']:9.2f} ms per call ({a.trips} trips)   sum {r['sum']:.6f}")


if __name__ == "__main__":
    main()
