"""Small ai.onnx.ml models (linear models, scalers, imputers, tree ensembles with random trees
and NaN inputs...) with onnxruntime's outputs, written as ONNX node-test directories, so that
`tgraph conformance OUT` compares tgraph with onnxruntime (docs/onnx.md). Needs onnx and
onnxruntime; not run by `make test`.

    python3 tests/conformance/ml_vs_onnxruntime.py /tmp/ml && tgraph conformance /tmp/ml
"""
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

rng = np.random.default_rng(0)
OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ml_vs_onnxruntime"
shutil.rmtree(OUT, ignore_errors=True)

def save(name, nodes, inputs, outputs, feeds, ml=3, opset=17, out_types=None):
    g = h.make_graph(nodes, name, inputs, outputs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid("ai.onnx.ml", ml)])
    m.ir_version = 9
    d = f"{OUT}/test_{name}"; os.makedirs(d + "/test_data_set_0")
    onnx.save(m, d + "/model.onnx")
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    res = s.run(None, {i.name: v for i, v in zip(inputs, feeds)})
    for k, v in enumerate(feeds):
        open(f"{d}/test_data_set_0/input_{k}.pb", "wb").write(nh.from_array(v, inputs[k].name).SerializeToString())
    for k, v in enumerate(res):
        open(f"{d}/test_data_set_0/output_{k}.pb", "wb").write(nh.from_array(np.asarray(v), outputs[k].name).SerializeToString())

def vi(n, t, s): return h.make_tensor_value_info(n, t, s)
X = rng.normal(size=(7, 4)).astype(np.float32)
F = vi("X", T.FLOAT, [7, 4])
save("ml_linear_regressor", [h.make_node("LinearRegressor", ["X"], ["Y"], domain="ai.onnx.ml", coefficients=rng.normal(size=8).tolist(), intercepts=[0.5, -1.0], targets=2)], [F], [vi("Y", T.FLOAT, None)], [X])
for pt in ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]:
    save(f"ml_linear_classifier_{pt.lower()}", [h.make_node("LinearClassifier", ["X"], ["L", "S"], domain="ai.onnx.ml", coefficients=(rng.normal(size=12) * 0.3).tolist(), intercepts=[0.1, 0.2, -0.3], classlabels_ints=[4, 5, 6], post_transform=pt)], [F], [vi("L", T.INT64, None), vi("S", T.FLOAT, None)], [X])
for pt in ["NONE", "LOGISTIC"]:
    save(f"ml_linear_classifier_binary_{pt.lower()}", [h.make_node("LinearClassifier", ["X"], ["L", "S"], domain="ai.onnx.ml", coefficients=rng.normal(size=4).tolist(), intercepts=[0.1], classlabels_ints=[0, 1], post_transform=pt)], [F], [vi("L", T.INT64, None), vi("S", T.FLOAT, None)], [X])
save("ml_scaler", [h.make_node("Scaler", ["X"], ["Y"], domain="ai.onnx.ml", offset=[0.1, 0.2, 0.3, 0.4], scale=[2.0, 0.5, 1.0, 3.0])], [F], [vi("Y", T.FLOAT, None)], [X])
for norm in ["MAX", "L1", "L2"]:
    save(f"ml_normalizer_{norm.lower()}", [h.make_node("Normalizer", ["X"], ["Y"], domain="ai.onnx.ml", norm=norm)], [F], [vi("Y", T.FLOAT, None)], [X])
save("ml_binarizer", [h.make_node("Binarizer", ["X"], ["Y"], domain="ai.onnx.ml", threshold=0.2)], [F], [vi("Y", T.FLOAT, None)], [X])
save("ml_array_feature_extractor", [h.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"], domain="ai.onnx.ml")], [F, vi("I", T.INT64, [3])], [vi("Y", T.FLOAT, None)], [X, np.array([3, 0, 3], np.int64)])
Xi = rng.integers(0, 6, size=(3, 4)).astype(np.int64)
save("ml_label_encoder_int_int", [h.make_node("LabelEncoder", ["X"], ["Y"], domain="ai.onnx.ml", keys_int64s=[1, 3, 5], values_int64s=[10, 30, 50], default_int64=-7)], [vi("X", T.INT64, [3, 4])], [vi("Y", T.INT64, None)], [Xi])
save("ml_label_encoder_float_float", [h.make_node("LabelEncoder", ["X"], ["Y"], domain="ai.onnx.ml", keys_floats=[1.0, 3.0, 5.0], values_floats=[0.5, 1.5, 2.5], default_float=9.0)], [vi("X", T.FLOAT, [3, 4])], [vi("Y", T.FLOAT, None)], [Xi.astype(np.float32)])

# Random trees (legacy encoding): depth up to 4, complete-ish.
def random_tree(tid, nfeat, depth, ntarg, modes=("BRANCH_LEQ",)):
    nodes = []
    def build(d):
        nid = len(nodes); nodes.append(None)
        if d == depth or (d > 1 and rng.random() < 0.3):
            nodes[nid] = dict(mode="LEAF", f=0, v=0.0, t=0, fl=0, miss=0); return nid
        n = dict(mode=str(rng.choice(modes)), f=int(rng.integers(nfeat)), v=float(np.float32(rng.normal())), miss=int(rng.integers(2)))
        nodes[nid] = n
        n["t"] = build(d + 1); n["fl"] = build(d + 1)
        return nid
    build(0)
    return nodes
def legacy_attrs(trees, ntarg, prefix, per_leaf=1):
    a = dict(nodes_treeids=[], nodes_nodeids=[], nodes_featureids=[], nodes_values=[], nodes_modes=[], nodes_truenodeids=[], nodes_falsenodeids=[], nodes_missing_value_tracks_true=[])
    a.update({f"{prefix}_treeids": [], f"{prefix}_nodeids": [], f"{prefix}_ids": [], f"{prefix}_weights": []})
    for tid, nodes in enumerate(trees):
        for nid, n in enumerate(nodes):
            a["nodes_treeids"].append(tid); a["nodes_nodeids"].append(nid); a["nodes_featureids"].append(n["f"]); a["nodes_values"].append(n["v"]); a["nodes_modes"].append(n["mode"])
            a["nodes_truenodeids"].append(n["t"] if n["mode"] != "LEAF" else 0); a["nodes_falsenodeids"].append(n["fl"] if n["mode"] != "LEAF" else 0); a["nodes_missing_value_tracks_true"].append(n["miss"])
            if n["mode"] == "LEAF":
                for k in rng.choice(ntarg, size=per_leaf, replace=False):
                    a[f"{prefix}_treeids"].append(tid); a[f"{prefix}_nodeids"].append(nid); a[f"{prefix}_ids"].append(int(k)); a[f"{prefix}_weights"].append(float(np.float32(rng.normal())))
    return a
Xn = rng.normal(size=(50, 5)).astype(np.float32); Xn[3, 1] = np.nan; Xn[7, 0] = np.nan; Xn[11, :] = np.nan
F5 = vi("X", T.FLOAT, [50, 5])
modes = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT")
for agg in ["SUM", "AVERAGE", "MIN", "MAX"]:
    trees = [random_tree(t, 5, 4, 2, modes) for t in range(6)]
    a = legacy_attrs(trees, 2, "target", per_leaf=1 if agg in ("MIN", "MAX") else 2)
    save(f"ml_tree_regressor_{agg.lower()}", [h.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=2, aggregate_function=agg, base_values=[0.25, -0.5], **a)], [F5], [vi("Y", T.FLOAT, None)], [Xn])
for pt in ["NONE", "SOFTMAX", "LOGISTIC"]:
    trees = [random_tree(t, 5, 3, 3, modes) for t in range(5)]
    a = legacy_attrs(trees, 3, "class", per_leaf=3)
    save(f"ml_tree_classifier_{pt.lower()}", [h.make_node("TreeEnsembleClassifier", ["X"], ["L", "S"], domain="ai.onnx.ml", classlabels_int64s=[7, 8, 9], post_transform=pt, **a)], [F5], [vi("L", T.INT64, None), vi("S", T.FLOAT, None)], [Xn])
for pt in ["NONE", "LOGISTIC"]:
    trees = [random_tree(t, 5, 3, 1, modes) for t in range(5)]
    a = legacy_attrs(trees, 1, "class", per_leaf=1)
    save(f"ml_tree_classifier_binary_{pt.lower()}", [h.make_node("TreeEnsembleClassifier", ["X"], ["L", "S"], domain="ai.onnx.ml", classlabels_int64s=[0, 1], post_transform=pt, **a)], [F5], [vi("L", T.INT64, None), vi("S", T.FLOAT, None)], [Xn])
Xm = X.copy(); Xm[1, 2] = np.nan; Xm[4, 0] = np.nan
save("ml_imputer_nan", [h.make_node("Imputer", ["X"], ["Y"], domain="ai.onnx.ml", imputed_value_floats=[1.0, 2.0, 3.0, 4.0], replaced_value_float=float("nan"))], [F], [vi("Y", T.FLOAT, None)], [Xm])
save("ml_imputer_int", [h.make_node("Imputer", ["X"], ["Y"], domain="ai.onnx.ml", imputed_value_int64s=[9], replaced_value_int64=3)], [vi("X", T.INT64, [3, 4])], [vi("Y", T.INT64, None)], [Xi])
save("ml_one_hot_encoder", [h.make_node("OneHotEncoder", ["X"], ["Y"], domain="ai.onnx.ml", cats_int64s=[1, 3, 5, 0], zeros=1)], [vi("X", T.INT64, [3, 4])], [vi("Y", T.FLOAT, None)], [Xi])
save("ml_feature_vectorizer", [h.make_node("FeatureVectorizer", ["X", "K"], ["Y"], domain="ai.onnx.ml", inputdimensions=[4, 2])], [vi("X", T.FLOAT, [3, 4]), vi("K", T.FLOAT, [3, 2])], [vi("Y", T.FLOAT, None)], [X[:3], X[:3, :2]])


# TreeEnsemble (ai.onnx.ml 5): random trees with every comparison mode, NaN tracking, leaves in
# their own list; each aggregate. (Post transforms are left out: onnxruntime 1.32 reads the
# integer codes in its own order, 1 as LOGISTIC where the operator says SOFTMAX.)
def random_v5(n_trees, n_feat, depth, n_targets):
    nodes = dict(modes=[], feat=[], split=[], true_id=[], true_leaf=[], false_id=[], false_leaf=[], miss=[])
    leaves = dict(target=[], weight=[])
    roots = []

    def build(d):
        if d == depth or (d > 1 and rng.random() < 0.3):
            leaves["target"].append(int(rng.integers(n_targets)))
            leaves["weight"].append(float(np.float32(rng.normal())))
            return len(leaves["target"]) - 1, 1
        i = len(nodes["modes"])
        for k in nodes:
            nodes[k].append(0)
        nodes["modes"][i] = int(rng.integers(6))
        nodes["feat"][i] = int(rng.integers(n_feat))
        nodes["split"][i] = float(np.float32(np.round(rng.normal(), 1)))
        nodes["miss"][i] = int(rng.integers(2))
        nodes["true_id"][i], nodes["true_leaf"][i] = build(d + 1)
        nodes["false_id"][i], nodes["false_leaf"][i] = build(d + 1)
        return i, 0

    for _ in range(n_trees):
        r, is_leaf = build(0)
        roots.append(r)
    return dict(tree_roots=roots, nodes_modes=nh.from_array(np.array(nodes["modes"], np.uint8)),
                nodes_featureids=nodes["feat"], nodes_splits=nh.from_array(np.array(nodes["split"], np.float32)),
                nodes_truenodeids=nodes["true_id"], nodes_trueleafs=nodes["true_leaf"],
                nodes_falsenodeids=nodes["false_id"], nodes_falseleafs=nodes["false_leaf"],
                nodes_missing_value_tracks_true=nodes["miss"], leaf_targetids=leaves["target"],
                leaf_weights=nh.from_array(np.array(leaves["weight"], np.float32)))


Xv = np.round(rng.normal(size=(40, 4)), 1).astype(np.float32)  # ties with the splits, for == and !=
Xv[2, 1] = np.nan
Xv[9, :] = np.nan
for agg, pt in [(1, 0), (0, 0), (2, 0), (3, 0)]:
    a = random_v5(4, 4, 4, 2)
    save(f"ml_tree_ensemble_v5_agg{agg}_post{pt}",
         [h.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=2, aggregate_function=agg,
                      post_transform=pt, **a)],
         [vi("X", T.FLOAT, [40, 4])], [vi("Y", T.FLOAT, None)], [Xv], ml=5, opset=21)
print(f"wrote {len(os.listdir(OUT))} tests to {OUT}")
