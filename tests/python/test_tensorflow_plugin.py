"""The TGRAPH PluggableDevice (issue 24, python/tensorflow/): ops with a tgraph kernel run on
tgraph from eager TensorFlow and inside Keras's model.fit, with TensorFlow's numbers.

TensorFlow cannot be unloaded and fixes its device list at first use, so every check runs in a
child process. Needs the plugin built against tensorflow-cpu 2.19.1 (docs/tensorflow-plugin.md):
TGRAPH_TF_PLUGIN=<build>/libtgraph_tensorflow.so, and TGRAPH_TF_PYTHONPATH where TensorFlow is
installed apart from this interpreter's packages (pip install --target DIR tensorflow-cpu==2.19.1).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = os.environ.get("TGRAPH_TF_PLUGIN", "")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not PLUGIN or not Path(PLUGIN).is_file(),
    reason="the TGRAPH TensorFlow plugin is not built: set TGRAPH_TF_PLUGIN (docs/tensorflow-plugin.md)")


def _child(code: str, plugin: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TGRAPH_TF_LOG="1")
    extra = os.environ.get("TGRAPH_TF_PYTHONPATH", "")
    if extra:
        env["PYTHONPATH"] = extra + os.pathsep + env.get("PYTHONPATH", "")
    if plugin:
        env["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"] = PLUGIN
    else:
        env.pop("TF_PLUGGABLE_DEVICE_LIBRARY_PATH", None)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)


def _compiled(stderr: str) -> set:
    return {line.split()[2] for line in stderr.splitlines() if line.startswith("[tgraph-tf] compiled ")}


OPS = r'''
import numpy as np, tensorflow as tf
assert tf.config.list_physical_devices("TGRAPH"), "no TGRAPH device"
rng = np.random.RandomState(0)
worst = {}
for dt in ("float32", "float64"):
    a = tf.constant(rng.randn(6, 5).astype(dt)); b = tf.constant(rng.randn(5, 4).astype(dt))
    c = tf.constant(rng.randn(6, 4).astype(dt)); bias = tf.constant(rng.randn(4).astype(dt))
    x = tf.constant(rng.randn(2, 4, 3, 3).astype(dt))
    cases = {
        "MatMul": lambda: tf.linalg.matmul(a, b, transpose_b=False),
        "MatMulT": lambda: tf.linalg.matmul(a, c, transpose_a=True),
        "BiasAdd": lambda: tf.nn.bias_add(c, bias),
        "BiasAddNCHW": lambda: tf.nn.bias_add(x, bias, data_format="NCHW"),
        "BiasAddGrad": lambda: tf.raw_ops.BiasAddGrad(out_backprop=c),
        "Relu": lambda: tf.nn.relu(c), "ReluGrad": lambda: tf.raw_ops.ReluGrad(gradients=a[:, :4], features=c),
        "Sigmoid": lambda: tf.sigmoid(c), "Tanh": lambda: tf.tanh(c), "Exp": lambda: tf.exp(c),
        "Log": lambda: tf.math.log(tf.abs(c) + 0.5), "Sqrt": lambda: tf.sqrt(tf.abs(c)),
        "Rsqrt": lambda: tf.math.rsqrt(tf.abs(c) + 0.5), "Square": lambda: tf.square(c), "Neg": lambda: -c,
        "AddV2": lambda: c + bias, "Sub": lambda: c - bias, "Mul": lambda: c * bias, "RealDiv": lambda: c / (tf.abs(bias) + 1),
        "Maximum": lambda: tf.maximum(c, bias), "Minimum": lambda: tf.minimum(c, bias),
        "SquaredDifference": lambda: tf.math.squared_difference(c, bias),
        "SigmoidGrad": lambda: tf.raw_ops.SigmoidGrad(y=tf.sigmoid(c), dy=c),
        "TanhGrad": lambda: tf.raw_ops.TanhGrad(y=tf.tanh(c), dy=c), "Softmax": lambda: tf.nn.softmax(c),
        "Sum": lambda: tf.reduce_sum(c, axis=0), "SumKeep": lambda: tf.reduce_sum(c, axis=[-1], keepdims=True),
        "Mean": lambda: tf.reduce_mean(x, axis=[1, 2]), "Reshape": lambda: tf.reshape(c, [3, -1]),
        "Pow": lambda: tf.pow(tf.abs(c) + 0.1, bias), "Erf": lambda: tf.math.erf(c), "Erfc": lambda: tf.math.erfc(c),
        "BatchMatMulV2": lambda: tf.linalg.matmul(x, x, adjoint_b=True),
        "Transpose": lambda: tf.transpose(x, [0, 2, 1, 3]), "ExpandDims": lambda: tf.expand_dims(c, -1),
        "Tile": lambda: tf.tile(c, [2, 1]), "LogSoftmax": lambda: tf.nn.log_softmax(c),
        "AddN": lambda: tf.math.add_n([c, c * 2, c + bias]), "Reciprocal": lambda: tf.math.reciprocal(tf.abs(c) + 1),
        "Abs": lambda: tf.abs(c),
        "Equal": lambda: tf.equal(tf.round(c), tf.round(bias)), "NotEqual": lambda: tf.not_equal(tf.round(c), tf.round(bias)),
        "Less": lambda: tf.less(c, bias), "LessEqual": lambda: tf.less_equal(tf.round(c), tf.round(bias)),
        "Greater": lambda: tf.greater(c, bias), "GreaterEqual": lambda: tf.greater_equal(tf.round(c), tf.round(bias)),
        "SelectV2": lambda: tf.where(c > 0, c, bias * 2),
        "RsqrtGrad": lambda: tf.raw_ops.RsqrtGrad(y=tf.abs(c) + 0.5, dy=c),
        "SqrtGrad": lambda: tf.raw_ops.SqrtGrad(y=tf.abs(c) + 0.5, dy=c),
        "DivNoNan": lambda: tf.math.divide_no_nan(c, bias * tf.constant([1, 0, 1, 1], dtype=dt)),
        "SparseSoftmaxCrossEntropyWithLogits": lambda: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
            features=c, labels=tf.constant([0, 3, 1, 2, 3, 0]))[0],
        "SparseSoftmaxCrossEntropyWithLogitsGrad": lambda: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
            features=c, labels=tf.constant([0, 3, 1, 2, 3, 0]))[1],
    }
    img = tf.constant(rng.randn(2, 9, 8, 3).astype(dt)); flt = tf.constant(rng.randn(3, 3, 3, 4).astype(dt))
    for pad in ("SAME", "VALID"):
        for stride in (1, 2):
            st = [1, stride, stride, 1]
            y = tf.nn.conv2d(img, flt, st, pad)
            dy = tf.constant(rng.randn(*y.shape).astype(dt))
            cases[f"Conv2D {pad} {stride}"] = lambda st=st, pad=pad: tf.nn.conv2d(img, flt, st, pad)
            cases[f"Conv2DBackpropInput {pad} {stride}"] = lambda st=st, pad=pad, dy=dy: tf.raw_ops.Conv2DBackpropInput(
                input_sizes=tf.constant([2, 9, 8, 3]), filter=flt, out_backprop=dy, strides=st, padding=pad)
            cases[f"Conv2DBackpropFilter {pad} {stride}"] = lambda st=st, pad=pad, dy=dy: tf.raw_ops.Conv2DBackpropFilter(
                input=img, filter_sizes=tf.constant([3, 3, 3, 4]), out_backprop=dy, strides=st, padding=pad)
            mp = tf.nn.max_pool2d(img, 3, stride, pad)
            dmp = tf.constant(rng.randn(*mp.shape).astype(dt))
            cases[f"MaxPool {pad} {stride}"] = lambda stride=stride, pad=pad: tf.nn.max_pool2d(img, 3, stride, pad)
            cases[f"MaxPoolGrad {pad} {stride}"] = lambda stride=stride, pad=pad, mp=mp, dmp=dmp: tf.raw_ops.MaxPoolGrad(
                orig_input=img, orig_output=mp, grad=dmp, ksize=[1, 3, 3, 1], strides=[1, stride, stride, 1], padding=pad)
    for name, f in cases.items():
        with tf.device("/TGRAPH:0"):
            got = f()
        with tf.device("/CPU:0"):
            want = f()
        assert "TGRAPH" in got.device, (name, got.device)
        g64, w64 = np.asarray(got.numpy(), np.float64), np.asarray(want.numpy(), np.float64)  # booleans too
        err = float(np.max(np.abs(g64 - w64)) / (np.max(np.abs(w64)) + 1e-30))
        worst[f"{name} {dt}"] = err
bad = {k: v for k, v in worst.items() if v > (2e-6 if "float32" in k else 1e-12)}
assert not bad, bad
print("ok", len(worst))
'''


def test_ops_run_on_tgraph_with_tensorflows_values():
    r = _child(OPS)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
    ran = _compiled(r.stderr)
    for op in ("MatMul", "BiasAdd", "BiasAddGrad", "Relu", "ReluGrad", "Sigmoid", "SigmoidGrad", "Tanh", "TanhGrad",
               "Softmax", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference", "Exp",
               "Log", "Sqrt", "Rsqrt", "Square", "Neg", "Sum", "Mean", "Reshape", "Conv2D", "Conv2DBackpropInput",
               "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad", "Pow", "Erf", "Erfc", "BatchMatMulV2", "Transpose",
               "ExpandDims", "Tile", "LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits", "AddN", "Reciprocal", "Abs",
               "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "SelectV2", "RsqrtGrad", "SqrtGrad",
               "DivNoNan"):
        assert op in ran, f"{op} did not run on tgraph; ran: {sorted(ran)}"


@pytest.mark.parametrize("kind,ops", [
    ("mlp", ("MatMul", "BiasAdd", "BiasAddGrad", "Relu", "ReluGrad")),
    ("cnn", ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad", "Mean",
             "SquaredDifference", "Rsqrt", "MatMul", "ReluGrad")),
    ("transformer", ("BatchMatMulV2", "Softmax", "Erfc", "SparseSoftmaxCrossEntropyWithLogits", "Mean", "Rsqrt",
                     "MatMul", "BiasAddGrad")),
    ("tape", ("MatMul", "BiasAdd", "BiasAddGrad", "Relu", "ReluGrad", "Sigmoid")),
    ("savedmodel", ("MatMul", "BiasAdd", "Relu", "Sigmoid")),
    ("fashion", ("Conv2D", "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad", "SparseSoftmaxCrossEntropyWithLogits")),
])
def test_keras_fit_runs_its_math_on_tgraph_and_matches_tensorflow(kind, ops):
    """smoke.py: model.fit of a Keras MLP, a CNN with batch norm, max pooling and dropout, and a
    transformer encoder (embedding, multi-head attention, layer norm, GELU; AdamW), a tf.function
    loop with GradientTape and a Keras optimizer, and a model exported as a SavedModel, loaded
    and served, under /TGRAPH:0 (evaluate and predict too); and a CNN trained on Fashion-MNIST
    (12,000 images, two epochs) reaching TensorFlow alone's test accuracy within half a point against TensorFlow alone (a child without the plugin): losses and weights
    within 1e-4, and the step's ops named here compiled by tgraph."""
    if kind == "fashion" and not Path("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip("Debian's dataset-fashion-mnist is not installed (scripts/install-deps.sh installs it)")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TGRAPH_TF_LOG="1", TF_PLUGGABLE_DEVICE_LIBRARY_PATH=PLUGIN)
    extra = os.environ.get("TGRAPH_TF_PYTHONPATH", "")
    if extra:
        env["PYTHONPATH"] = extra + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, str(ROOT / "python/tensorflow/smoke.py"), kind], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    ran = _compiled(r.stderr)
    for op in ops:
        assert op in ran, f"{op} did not run on tgraph; ran: {sorted(ran)}"
    # the step's converted ops ran as clusters (one executable per connected group), not one by one
    assert "clusters formed" in r.stderr, r.stderr[-2000:]
    in_clusters = {line.split()[2] for line in r.stderr.splitlines()
                   if line.startswith("[tgraph-tf] compiled ") and "cluster '" in line}
    assert set(ops) & in_clusters, f"none of {ops} ran inside a cluster; clustered: {sorted(in_clusters)}"
    if kind == "mlp":  # Adam's assign_add / assign_sub computed in the clusters, matching TensorFlow still
        assert "variable updates folded into the clusters" in r.stderr, r.stderr[-2000:]


CYCLE = r'''
import numpy as np, tensorflow as tf
x = tf.constant(np.random.RandomState(3).randn(6, 5).astype("float32"))

@tf.function
def f(x):
    y = tf.nn.relu(x) * 3.0        # Relu, Mul: one group
    z = tf.round(y)                # no converter: on TensorFlow's CPU
    w = tf.sigmoid(y) + z          # reads y directly and through Round: may not join y's group
    return tf.tanh(w) - y          # Tanh, Sub: w's group

with tf.device("/TGRAPH:0"):
    got = f(x).numpy()
with tf.device("/CPU:0"):
    want = f.python_function(x).numpy()
assert np.abs(got - want).max() < 1e-6, np.abs(got - want).max()
print("ok")
'''


def test_clusters_never_close_a_cycle_through_the_cpu():
    """A value read by a later op both directly and through an op left on TensorFlow's CPU: the
    two ops may not share a cluster (it would wait on itself). The run completes, matches
    TensorFlow, and the ops on either side of the CPU op compile in different clusters."""
    r = _child(CYCLE)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
    cluster_of = {}
    for line in r.stderr.splitlines():
        if line.startswith("[tgraph-tf] compiled ") and "cluster '" in line:
            cluster_of[line.split()[2]] = line.split("cluster '")[1].split("'")[0]
    assert "Relu" in cluster_of and "Tanh" in cluster_of, r.stderr[-2000:]
    assert cluster_of["Relu"] != cluster_of["Tanh"], cluster_of


CONDS = r'''
import json, numpy as np, tensorflow as tf
rng = np.random.RandomState(0)
w = tf.Variable(rng.randn(3, 3).astype("float32"))

def forward(x, s):
    h = tf.matmul(x, w)
    return tf.cond(tf.reduce_sum(h) > s, lambda: tf.tanh(h) * 2.0,
                   lambda: tf.cond(tf.reduce_mean(h) < 0.0, lambda: tf.sigmoid(h) * h, lambda: h * h - 1.0))

@tf.function
def infer(x, s):
    return forward(x, s), tf.zeros([3, 3])

@tf.function
def step(x, s):
    with tf.GradientTape() as tape:
        y = forward(x, s)
        loss = tf.reduce_sum(y * y)
    return y, tape.gradient(loss, w)

x = tf.constant(rng.randn(4, 3).astype("float32"))
out = {}
for s in (-100.0, 100.0, -100.0):  # then, else (the inner cond by the data), then again
    for sign in (1.0, -1.0):
        for name, f in (("infer", infer), ("step", step)):
            y, g = f(x * sign, tf.constant(s))
            out[f"{name},{s},{sign}"] = [y.numpy().tolist(), g.numpy().tolist()]
print("RESULT " + json.dumps(out))
'''


def test_tf_cond_runs_as_tgraph_if_else_with_tensorflows_values():
    """A tf.function with a tf.cond nested in another's else branch: both lowered Switch / Merge
    conditionals are rebuilt as TgraphIf nodes (tgraph's if_else inside the cluster), every
    branch is taken across the calls, and the values equal TensorFlow alone's. Under a
    GradientTape too: the intermediates TensorFlow hands from the forward conditionals to the
    backward's as optionals are read directly, so the differentiated step's conditionals are
    rebuilt as well (no optional op left on TensorFlow's CPU); values and gradients equal
    TensorFlow's."""
    import json
    got, want = _child(CONDS), _child(CONDS, plugin=False)
    assert got.returncode == 0 and want.returncode == 0, (got.stderr[-3000:], want.stderr[-3000:])
    rebuilt = sum(int(line.split()[1]) for line in got.stderr.splitlines()
                  if line.startswith("[tgraph-tf] ") and "conditionals rebuilt" in line)
    assert rebuilt >= 2, got.stderr[-3000:]  # infer's two
    assert "Optional" not in "".join(line for line in got.stderr.splitlines() if "on TensorFlow's CPU" in line), \
        got.stderr[-3000:]
    # the differentiated step's conditionals stay lowered (the backward reads the forward's
    # branch values and takes the gradient of its result: one node would be a cycle), and the
    # rewritten graph is one TensorFlow can order and optimise (not thrown away for a cycle)
    assert "topological" not in got.stderr and "failed" not in got.stderr, got.stderr[-3000:]
    g = json.loads(next(line[7:] for line in got.stdout.splitlines() if line.startswith("RESULT ")))
    w = json.loads(next(line[7:] for line in want.stdout.splitlines() if line.startswith("RESULT ")))
    import numpy as np
    for k in w:
        for a, b in zip(g[k], w[k]):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6, err_msg=k)


CONDS_HARD = r'''
import json, numpy as np, tensorflow as tf
rng = np.random.RandomState(2)

@tf.function
def nested(x, s):
    # the outer predicate's name sorts before the inner one's (the outer is looked at first), and
    # the outer branch reads a node below the inner conditional's join, live only on that branch
    p = tf.greater(tf.reduce_sum(x), s, name="a_first")
    return tf.cond(p, lambda: tf.cond(tf.reduce_mean(x) > 0.0, lambda: tf.tanh(x), lambda: x * x) * 3.0 + x,
                   lambda: tf.sigmoid(x) - 1.0)

@tf.function
def axis_at_run_time(x, s, axis):
    # the branches' sums take their axes from tensors known only at run time (computed, or an argument)
    return tf.cond(tf.reduce_sum(x) > s, lambda: tf.reduce_sum(x * 2.0, axis=tf.where(tf.reduce_max(x) > 100.0, 1, 0)),
                   lambda: tf.reduce_sum(x - 1.0, axis=axis))

out = {}
x = tf.constant(rng.randn(4, 3).astype("float32"))
for s in (-100.0, 100.0):
    for sign in (1.0, -1.0):
        out[f"nested,{s},{sign}"] = nested(x * sign, tf.constant(s)).numpy().tolist()
        for axis in (0, 1):
            out[f"axis,{s},{sign},{axis}"] = axis_at_run_time(x * sign, tf.constant(s), tf.constant(axis)).numpy().tolist()
print("RESULT " + json.dumps(out))
'''


def test_tf_cond_rebuilding_keeps_dead_values_and_run_time_axes_out():
    """Two ways a rebuilt conditional could read wrong values, each against TensorFlow's values:
    an outer branch reading a node below a nested conditional's join (a value live only on that
    branch: the outer conditional is looked at first, but rebuilt only after the nested one,
    never with the nested join as an input), and sums taking their axes from tensors known only
    at run time (left lowered: inside a rebuilt branch the axes would have no values when tgraph
    builds the graph)."""
    import json
    import numpy as np
    got, want = _child(CONDS_HARD), _child(CONDS_HARD, plugin=False)
    assert got.returncode == 0 and want.returncode == 0, (got.stderr[-3000:], want.stderr[-3000:])
    rebuilt = sum(int(line.split()[1]) for line in got.stderr.splitlines()
                  if line.startswith("[tgraph-tf] ") and "conditionals rebuilt" in line)
    assert rebuilt >= 2, got.stderr[-3000:]  # the nested pair
    g = json.loads(next(line[7:] for line in got.stdout.splitlines() if line.startswith("RESULT ")))
    w = json.loads(next(line[7:] for line in want.stdout.splitlines() if line.startswith("RESULT ")))
    assert set(g) == set(w)
    for k in w:
        np.testing.assert_allclose(np.array(g[k]), np.array(w[k]), rtol=1e-5, atol=1e-6, err_msg=k)


LOOPS = r'''
import json, numpy as np, tensorflow as tf
rng = np.random.RandomState(1)
w = tf.constant(rng.randn(3, 3).astype("float32") * 0.5)

@tf.function
def run(x, limit):
    # a data-dependent trip count, an invariant (w) read in the body, a tf.cond inside the body,
    # and a loop inside a tf.cond's branch
    def body(i, y, total):
        y = tf.cond(tf.reduce_sum(y) > 0.0, lambda: tf.tanh(tf.matmul(y, w)), lambda: tf.sigmoid(y) - 0.25)
        return i + 1, y, total + tf.reduce_sum(y * y)
    i, y, total = tf.while_loop(lambda i, y, t: tf.logical_and(i < 20, t < limit), body,
                                [tf.constant(0), x, tf.constant(0.0)])
    z = tf.cond(total > 1.0,
                lambda: tf.while_loop(lambda k, v: k < 3, lambda k, v: (k + 1, v * 0.5 + y), [tf.constant(0), y])[1],
                lambda: y * 2.0)
    return i, y, total, z

v = tf.Variable(w)

@tf.function
def grad(x):  # a differentiated loop: its accumulators are TensorLists, which stay on TensorFlow
    with tf.GradientTape() as tape:
        y = tf.while_loop(lambda k, y: k < 4, lambda k, y: (k + 1, tf.tanh(tf.matmul(y, v))), [0, x])[1]
        loss = tf.reduce_sum(y * y)
    return tape.gradient(loss, v)

out = {}
for limit in (0.5, 3.0, 1000.0):
    for sign in (1.0, -1.0):
        x = tf.constant(rng.randn(4, 3).astype("float32")) * sign
        r = run(x, tf.constant(limit))
        out[f"{limit},{sign}"] = [t.numpy().tolist() for t in r]
        out[f"grad,{limit},{sign}"] = [-1, grad(x).numpy().tolist()]
print("RESULT " + json.dumps(out))
'''


def test_tf_while_loop_runs_as_tgraph_while_loop_with_tensorflows_values():
    """tf.while_loop with a data-dependent trip count, an invariant read in its body, a tf.cond
    inside the body and a loop inside a tf.cond's branch: every frame and conditional is
    rebuilt (TgraphWhile / TgraphIf: tgraph's while_loop and if_else in the cluster), trip
    counts from 0 to 20 across the calls, values equal TensorFlow alone's; a differentiated
    loop (left to TensorFlow's frames: its accumulators are TensorLists) gives TensorFlow's
    gradient."""
    import json
    import numpy as np
    got, want = _child(LOOPS), _child(LOOPS, plugin=False)
    assert got.returncode == 0 and want.returncode == 0, (got.stderr[-3000:], want.stderr[-3000:])

    def said(what):
        return sum(int(line.split()[1]) for line in got.stderr.splitlines()
                   if line.startswith("[tgraph-tf] ") and what in line)
    assert said("while loops rebuilt") >= 2 and said("conditionals rebuilt") >= 2, got.stderr[-3000:]
    g = json.loads(next(line[7:] for line in got.stdout.splitlines() if line.startswith("RESULT ")))
    w = json.loads(next(line[7:] for line in want.stdout.splitlines() if line.startswith("RESULT ")))
    trips = {w[k][0] for k in w if not k.startswith("grad")}
    assert len(trips) >= 3, trips  # the calls take different trip counts
    for k in w:
        for a, b in zip(g[k], w[k]):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6, err_msg=k)


def test_pip_package_puts_the_plugin_where_tensorflow_loads_it(tmp_path):
    """`pip install ./python/tensorflow` (the documented line; here without build isolation or
    dependencies, into a folder named like site-packages) installs the plugin into
    tensorflow-plugins/ and tgraph's library beside it; TensorFlow imported from that
    site-packages loads it with no environment variable, lists one TGRAPH device and runs an
    op there."""
    pytest.importorskip("scikit_build_core", reason="scikit-build-core not installed (scripts/install-deps.sh installs it)")
    root = Path(__file__).resolve().parents[2]
    library = Path(PLUGIN).resolve().parents[2] / "src" / "libtgraph.so"
    if not library.is_file():
        pytest.skip(f"no libtgraph.so beside the plugin's build ({library})")
    site = tmp_path / "site-packages"
    got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                          "--target", str(site), f"--config-settings=cmake.define.TGRAPH_LIBRARY={library}",
                          f"--config-settings=build-dir={tmp_path / 'build'}", str(root / "python" / "tensorflow")],
                         capture_output=True, text=True, timeout=1200,
                         env=dict(os.environ, PYTHONPATH=os.environ.get("TGRAPH_TF_PYTHONPATH", "")))
    assert got.returncode == 0, got.stderr[-3000:]
    assert (site / "tensorflow-plugins" / "libtgraph_tensorflow.so").is_file()
    assert (site / "tgraph_tensorflow" / "libtgraph.so").is_file()
    # TensorFlow itself as if pip had put it there too (it loads plugins only from a
    # site-packages folder, and only when it was imported from one)
    tf_dir = Path(os.environ.get("TGRAPH_TF_PYTHONPATH", "")) / "tensorflow"
    if not tf_dir.is_dir():
        import tensorflow
        tf_dir = Path(tensorflow.__file__).parent
    (site / "tensorflow").symlink_to(tf_dir)
    code = ("import tensorflow as tf\n"
            "devs = tf.config.list_physical_devices('TGRAPH')\n"
            "with tf.device('/TGRAPH:0'):\n"
            "    y = tf.nn.relu(tf.constant([[1.0, -2.0, 3.5]]) - 1.5)\n"
            "print('RESULT', len(devs), y.device, y.numpy().tolist())\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TGRAPH_TF_LOG="1",
               PYTHONPATH=os.pathsep.join([str(site), os.environ.get("TGRAPH_TF_PYTHONPATH", "")]))
    env.pop("TF_PLUGGABLE_DEVICE_LIBRARY_PATH", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert r.returncode == 0 and line, r.stderr[-3000:]
    _, count, device, values = line.split(" ", 3)
    assert count == "1" and device.endswith("TGRAPH:0"), line
    assert values == "[[0.0, 0.0, 2.0]]", line
    assert "[tgraph-tf] compiled Relu" in r.stderr, r.stderr[-2000:]
