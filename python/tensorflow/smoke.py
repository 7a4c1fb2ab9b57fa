"""Smoke check of the TGRAPH PluggableDevice (issue 24), not yet part of `make test`.

    TF_PLUGGABLE_DEVICE_LIBRARY_PATH=build/python/tensorflow/libtgraph_tensorflow.so \
        PYTHONPATH=.deps/tflib python3 python/tensorflow/smoke.py [mlp|cnn|transformer|tape|savedmodel|fashion]

Checks that TensorFlow lists the device, and that a Keras MLP trained by model.fit (code
unchanged, run once under /TGRAPH:0 and once by TensorFlow alone in a child process without the
plugin) ends with the same losses and weights. Load the plugin through the variable, not from
site-packages/tensorflow-plugins/: from there the child would load it too and not be
TensorFlow alone. The ops with a converter run on tgraph (one executable per node,
src/kernels.cpp; TGRAPH_TF_LOG=1 prints each compile), the rest on TensorFlow's CPU kernels; the
variables live on TGRAPH (DEVICE_DEFAULT kernels) and the plugin's optimizer sees every
function graph.
"""
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def fashion_mnist(n_train: int, n_test: int):
    """Fashion-MNIST from Debian's dataset-fashion-mnist (IDX files; no download): the first
    n_train training and n_test test images, scaled to [0, 1], NHWC."""
    import gzip
    import numpy as np
    root = "/usr/share/datasets/fashion-mnist/"

    def read(name, offset, shape):
        with gzip.open(root + name) as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset).reshape(shape)
    xs = read("train-images-idx3-ubyte.gz", 16, (-1, 28, 28, 1))[:n_train].astype("float32") / 255
    ys = read("train-labels-idx1-ubyte.gz", 8, (-1,))[:n_train].astype("int32")
    xt = read("t10k-images-idx3-ubyte.gz", 16, (-1, 28, 28, 1))[:n_test].astype("float32") / 255
    yt = read("t10k-labels-idx1-ubyte.gz", 8, (-1,))[:n_test].astype("int32")
    return xs, ys, xt, yt


def train(device, kind="mlp"):
    import numpy as np
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    with tf.device(device):
        # No bias before batch norm: the norm cancels it, so its gradient is rounding noise,
        # which Adam's normalised step turns into moves of the learning rate's size either way.
        if kind == "fashion":  # a Keras CNN on Fashion-MNIST: test accuracy after two epochs
            x, y, xt, yt = fashion_mnist(12000, 2000)
            m = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(16, 3, use_bias=False),
                                  keras.layers.BatchNormalization(), keras.layers.ReLU(), keras.layers.MaxPooling2D(2),
                                  keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(2),
                                  keras.layers.Flatten(), keras.layers.Dropout(0.3), keras.layers.Dense(10)])
            m.compile(optimizer=keras.optimizers.Adam(1e-3), metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            h = m.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
            acc = float(m.evaluate(xt, yt, verbose=0)[1])
            return {"loss": h.history["loss"], "accuracy": acc, "weights": [], "eval": [acc], "pred": [],
                    "var_device": m.trainable_variables[0].value.device}
        if kind == "transformer":  # embedding, multi-head attention, layer norm, exact GELU; AdamW
            x = rng.randint(0, 50, size=(64, 10)).astype("int32")
            y = (x[:, 0] > 25).astype("int32")
            tokens = keras.Input((10,), dtype="int32")
            h = keras.layers.Embedding(50, 16)(tokens)
            h = keras.layers.LayerNormalization()(h + keras.layers.MultiHeadAttention(2, 8)(h, h))
            f = keras.layers.Dense(16)(keras.layers.Dense(32, activation="gelu")(h))
            h = keras.layers.LayerNormalization()(h + f)
            m = keras.Model(tokens, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h)))
            m.compile(optimizer=keras.optimizers.AdamW(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        elif kind == "cnn":  # convolutions, batch norm, max pooling, dropout (its mask drawn by TensorFlow)
            x = rng.rand(64, 12, 12, 1).astype("float32")
            y = (x.mean((1, 2, 3)) > 0.5).astype("int32")
            m = keras.Sequential([keras.Input((12, 12, 1)), keras.layers.Conv2D(8, 3, padding="same", use_bias=False),
                                  keras.layers.BatchNormalization(), keras.layers.ReLU(), keras.layers.MaxPooling2D(2),
                                  keras.layers.Conv2D(8, 3, activation="relu"), keras.layers.Flatten(),
                                  keras.layers.Dropout(0.25), keras.layers.Dense(2)])
            m.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        else:
            x = rng.randn(256, 8).astype("float32")
            y = (x.sum(1, keepdims=True) > 0).astype("float32")
            m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(1, activation="sigmoid")])
            m.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
        if kind == "tape":  # a tf.function loop with GradientTape and a Keras optimizer
            opt = keras.optimizers.SGD(0.05, momentum=0.9)
            bce = keras.losses.BinaryCrossentropy()

            @tf.function
            def step(xb, yb):
                with tf.GradientTape() as tape:
                    loss = bce(yb, m(xb, training=True))
                grads = tape.gradient(loss, m.trainable_variables)
                opt.apply_gradients(zip(grads, m.trainable_variables))
                return loss
            losses = [float(step(x[i:i + 32], y[i:i + 32])) for i in range(0, 256, 32) for _ in range(2)]
            out = {"loss": losses}
        else:
            h = m.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0)
            out = {"loss": h.history["loss"]}
        out["eval"] = [float(m.evaluate(x, y, verbose=0))]
        out["pred"] = np.asarray(m.predict(x[:16], verbose=0)).ravel().tolist()
        if kind == "savedmodel":  # exported, loaded back and served
            import tempfile
            d = tempfile.mkdtemp()
            m.export(d, verbose=False)
            loaded = tf.saved_model.load(d)  # held: its variables go with it
            served = loaded.serve(tf.constant(x[:16]))
            out["served"] = np.asarray(served).ravel().tolist()
            out["served_device"] = served.device
    out.update(weights=[w.tolist() for w in m.get_weights()], var_device=m.trainable_variables[0].value.device)
    return out


KIND = next((a for a in sys.argv[1:] if a in ("mlp", "cnn", "transformer", "tape", "savedmodel", "fashion")), "mlp")
if __name__ == "__main__" and "--child" in sys.argv[1:]:
    print(json.dumps(train("/CPU:0", KIND)))
    sys.exit(0)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

devices = tf.config.list_physical_devices("TGRAPH")
print("TGRAPH devices:", devices)
if not devices:
    sys.exit("no TGRAPH device: set TF_PLUGGABLE_DEVICE_LIBRARY_PATH to libtgraph_tensorflow.so")
ours = train("/TGRAPH:0", KIND)
env = {k: v for k, v in os.environ.items() if k != "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"}
ref = json.loads(subprocess.run([sys.executable, __file__, "--child", KIND], env=env, check=True,
                                capture_output=True, text=True).stdout.strip().splitlines()[-1])
if KIND == "fashion":  # the criterion: the same test accuracy within half a point
    print(f"test accuracy TGRAPH {ours['accuracy']:.4f}, TensorFlow alone {ref['accuracy']:.4f}; "
          f"losses {ours['loss']} / {ref['loss']}")
    sys.exit(0 if abs(ours["accuracy"] - ref["accuracy"]) <= 0.005 and "TGRAPH" in ours["var_device"] else 1)
dl = max(abs(a - b) for a, b in zip(ours["loss"], ref["loss"]))
dw = max(float(np.max(np.abs(np.array(a) - np.array(b)))) for a, b in zip(ours["weights"], ref["weights"]))
# evaluate, predict and (savedmodel) the served outputs against TensorFlow alone's
do = max(float(np.max(np.abs(np.array(ours[k]) - np.array(ref[k])))) for k in ("eval", "pred", "served") if k in ours)
print("variables on:", ours["var_device"])
print("losses TGRAPH:", ours["loss"])
print("losses TF    :", ref["loss"])
print(f"max |loss diff| {dl:.3g}, max |weight diff| {dw:.3g}, max |evaluate / predict / served diff| {do:.3g}")
print("per weight:", [round(float(np.max(np.abs(np.array(a) - np.array(b)))), 8) for a, b in zip(ours["weights"], ref["weights"])])
if "served_device" in ours:
    print("served on:", ours["served_device"])
ok = dl <= 1e-4 and dw <= 1e-4 and do <= 1e-4 and "TGRAPH" in ours["var_device"]
sys.exit(0 if ok and "TGRAPH" in ours.get("served_device", "TGRAPH") else 1)
