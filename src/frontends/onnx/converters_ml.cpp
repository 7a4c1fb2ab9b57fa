// Converters of the ai.onnx.ml domain that scikit-learn exports use: linear models, scalers,
// normalizers, binarizers, imputers, one-hot encoding, feature extraction and concatenation,
// numeric LabelEncoder and the tree ensembles.
// Tree ensembles run as a fixed number of gather steps: every tree's current node per sample,
// moved to the true or false child by one vectorised comparison a step (leaves point to
// themselves), as many steps as the deepest tree; then the leaves' values are gathered and
// aggregated. Comparisons in f64 (exact for f32 and f64 thresholds), like the leaf sums.
// Strings have no tgraph dtype: string labels and string LabelEncoder / StringNormalizer fail
// with the op named (docs/decisions.md).
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor f64_const(Graph& g, const std::vector<double>& v, std::vector<int64_t> dims) {
  return g.constant(TensorData::from_vector(Shape(std::move(dims)), DType::f64, v));
}

Tensor i64_const(Graph& g, const std::vector<int64_t>& v) {
  TensorData d(Shape({static_cast<int64_t>(v.size())}), DType::i64);
  for (size_t i = 0; i < v.size(); ++i) d.ptr<int64_t>()[i] = v[i];
  return g.constant(d);
}

// An attribute of floats, or of a tensor (`*_as_tensor`, TreeEnsemble's tensors), as doubles.
std::vector<double> doubles_attr(const Ctx& c, const std::string& name, const std::string& tensor_name = "") {
  if (!tensor_name.empty())
    if (auto t = c.attr_t(tensor_name)) return t->to_vector();
  if (c.has_attr(name) && c.attr_floats(name).empty())
    if (auto t = c.attr_t(name)) return t->to_vector();
  auto f = c.attr_floats(name);
  return {f.begin(), f.end()};
}

[[noreturn]] void refuse_strings(const Ctx& c, const std::string& what) {
  c.fail(what + " are strings; tgraph has no string dtype, so string labels are not supported");
}

// A [N, C] view of the features (a 1-D input is one sample), in f64 unless `keep` says its own dtype.
Tensor features(Ctx& c, int i, bool keep = false) {
  Tensor x = c.in(i);
  require_rank(c, x, 1, 2, "X");
  if (x.rank() == 1) x = c.g.reshape(x, {1, -1});
  return keep ? x : c.g.cast(x, DType::f64);
}

// ONNX-ML post transforms of a score matrix [N, C] (f64).
Tensor post_transform(Ctx& c, Tensor s, const std::string& how) {
  Graph& g = c.g;
  if (how == "NONE") return s;
  if (how == "LOGISTIC") return g.sigmoid(s);
  if (how == "SOFTMAX") return g.softmax(s, -1);
  if (how == "SOFTMAX_ZERO") {  // softmax over the non-zero scores; zeros stay (nearly) zero
    Tensor m = g.reduce_max(s, {-1}, true);
    Tensor nonzero = g.greater(g.abs(s), g.scalar(1e-7, DType::f64));
    Tensor e = g.select(nonzero, g.exp(g.sub(s, m)), g.mul(s, g.exp(g.neg(m))));
    Tensor sum = g.reduce_sum(e, {-1}, true);
    Tensor zero = g.equal(sum, g.scalar(0, DType::f64));
    return g.select(zero, g.broadcast_like(g.scalar(0.5, DType::f64), e),
                    g.div(e, g.select(zero, g.scalar(1, DType::f64), sum)));
  }
  if (how == "PROBIT") {  // sqrt(2) erfinv(2p - 1), erfinv by Winitzki's approximation (a = 0.147) as
                          // ONNX-ML's runtimes
    const double a = 0.147, pi = 3.14159265358979323846;
    Tensor y = g.sub(g.mul(s, g.scalar(2, DType::f64)), g.scalar(1, DType::f64));
    Tensor ln = g.log(g.mul(g.sub(g.scalar(1, DType::f64), y), g.add(g.scalar(1, DType::f64), y)));
    Tensor b = g.add(g.scalar(2 / (pi * a), DType::f64), g.mul(ln, g.scalar(0.5, DType::f64)));
    Tensor r = g.sqrt(g.sub(g.sqrt(g.sub(g.mul(b, b), g.mul(ln, g.scalar(1 / a, DType::f64)))), b));
    return g.mul(g.mul(g.sign(y), r), g.scalar(std::sqrt(2.0), DType::f64));
  }
  c.fail("post_transform '" + how + "' is not one of NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT");
}

std::string post_transform_name(int64_t code) {
  static const char* names[] = {"NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"};
  return code >= 0 && code <= 4 ? names[code] : "code " + std::to_string(code);
}

// Labels from scores [N, C] (f64): the class label of each row's largest score.
Tensor labels_of(Ctx& c, Tensor scores, const std::vector<int64_t>& labels) {
  Graph& g = c.g;
  return g.gather(i64_const(g, labels), g.argmax(scores, 1), 0);
}

// ---- elementwise and linear models ----

void binarizer(Ctx& c) {
  Tensor x = c.in(0);
  Graph& g = c.g;
  Tensor t = scalar_like(g, c.attr_f("threshold", 0.f), x);
  c.out(0, g.select(g.greater(x, t), scalar_like(g, 1, x), scalar_like(g, 0, x)));
}

void scaler(Ctx& c) {
  Graph& g = c.g;
  Tensor x = g.cast(c.in(0), DType::f64);
  auto offset = doubles_attr(c, "offset"), scale = doubles_attr(c, "scale");
  auto as_row = [&](const std::vector<double>& v, double def) {
    if (v.empty()) return g.scalar(def, DType::f64);
    if (v.size() == 1) return g.scalar(v[0], DType::f64);
    return f64_const(g, v, {static_cast<int64_t>(v.size())});
  };
  c.out(0, g.cast(g.mul(g.sub(x, as_row(offset, 0)), as_row(scale, 1)), DType::f32));
}

void normalizer(Ctx& c) {
  Graph& g = c.g;
  Tensor x = features(c, 0);
  const std::string norm = c.attr_s("norm", "MAX");
  Tensor d;
  if (norm == "MAX")
    d = g.reduce_max(x, {1}, true);
  else if (norm == "L1")
    d = g.reduce_sum(g.abs(x), {1}, true);
  else if (norm == "L2")
    d = g.sqrt(g.reduce_sum(g.mul(x, x), {1}, true));
  else
    c.fail("norm '" + norm + "' is not one of MAX, L1, L2");
  Tensor zero = g.equal(d, g.scalar(0, DType::f64));  // a zero divisor leaves X as it is
  Tensor y = g.div(x, g.select(zero, g.scalar(1, DType::f64), d));
  if (c.in(0).rank() == 1) y = g.reshape(y, {-1});
  c.out(0, g.cast(y, DType::f32));
}

void array_feature_extractor(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  if (x.rank() == 1) x = g.reshape(x, {1, -1});
  Tensor idx = g.reshape(g.cast(c.in(1), DType::i64), {-1});
  c.out(0, g.gather(x, idx, x.rank() - 1));
}

// scores = X W^T + b, W [C, F] from `coefficients`, in f64.
Tensor linear_scores(Ctx& c, Tensor x, int64_t rows) {
  Graph& g = c.g;
  auto coef = doubles_attr(c, "coefficients");
  auto b = doubles_attr(c, "intercepts");
  if (rows <= 0 || coef.empty() || coef.size() % static_cast<size_t>(rows) != 0)
    c.fail("coefficients (" + std::to_string(coef.size()) + ") do not split into " + std::to_string(rows) +
           " rows");
  const int64_t f = static_cast<int64_t>(coef.size()) / rows;
  if (x.shape()[1] >= 0 && x.shape()[1] != f)
    c.fail("X has " + std::to_string(x.shape()[1]) + " features, the coefficients " + std::to_string(f));
  Tensor s = g.matmul(x, f64_const(g, coef, {rows, f}), false, true);
  if (!b.empty()) {
    if (b.size() != static_cast<size_t>(rows)) c.fail("intercepts must number " + std::to_string(rows));
    s = g.add(s, f64_const(g, b, {rows}));
  }
  return s;
}

void linear_regressor(Ctx& c) {
  Tensor x = features(c, 0);
  Tensor s = linear_scores(c, x, c.attr_i("targets", 1));
  c.out(0, c.g.cast(post_transform(c, s, c.attr_s("post_transform", "NONE")), DType::f32));
}

void linear_classifier(Ctx& c) {
  Graph& g = c.g;
  if (c.has_attr("classlabels_strings")) refuse_strings(c, "classlabels_strings");
  auto labels = c.attr_ints("classlabels_ints");
  auto coef = doubles_attr(c, "coefficients");
  auto b = doubles_attr(c, "intercepts");
  const int64_t rows = b.empty() ? 1 : static_cast<int64_t>(b.size());
  Tensor x = features(c, 0);
  Tensor s = linear_scores(c, x, rows);
  const std::string how = c.attr_s("post_transform", "NONE");
  const bool binary = rows == 1 && labels.size() == 2;
  Tensor raw = binary ? g.concat({g.neg(s), s}, 1) : s;  // binary: [-score, score]
  // Labels come from the scores before the transform, as onnxruntime's; a binary model's
  // untransformed scores are [1 - score, score] there.
  s = binary && how == "NONE" ? g.concat({g.sub(g.scalar(1, DType::f64), s), s}, 1)
                              : post_transform(c, raw, how);
  Tensor y;
  if (raw.shape()[1] > 1) {
    if (labels.empty()) {
      y = g.argmax(raw, 1);
    } else {
      if (labels.size() != static_cast<size_t>(raw.shape()[1]))
        c.fail("classlabels_ints must number the score columns");
      y = labels_of(c, raw, labels);
    }
  } else {  // one score column: the first label when the score passes the threshold, else 0
    Tensor pass =
        g.reshape(g.greater_equal(s, g.scalar(how == "NONE" ? 0 : 0.5, DType::f64)), {-1});  // transformed
    Tensor one = g.scalar(labels.empty() ? 1 : static_cast<double>(labels[0]), DType::i64);
    y = g.select(pass, one, g.scalar(0, DType::i64));
  }
  c.out(0, y);
  c.out(1, g.cast(s, DType::f32));
}

// ---- LabelEncoder (numbers only) ----

// A LabelEncoder key, value or default list: ints, floats or a tensor attribute, as doubles.
std::optional<std::vector<double>> label_list(const Ctx& c, const std::string& kind, bool* is_int) {
  for (const char* strings : {"_strings"})
    if (c.has_attr(kind + strings)) refuse_strings(c, "the LabelEncoder's " + kind);
  if (c.has_attr(kind + "_int64s")) {
    *is_int = true;
    auto v = c.attr_ints(kind + "_int64s");
    return std::vector<double>(v.begin(), v.end());
  }
  if (c.has_attr(kind + "_floats")) {
    *is_int = false;
    auto v = c.attr_floats(kind + "_floats");
    return std::vector<double>(v.begin(), v.end());
  }
  if (c.has_attr(kind + "_tensor")) {
    auto t = c.attr_t(kind + "_tensor");
    *is_int = !is_float(t->dtype());
    return t->to_vector();
  }
  return std::nullopt;
}

void label_encoder(Ctx& c) {
  Graph& g = c.g;
  if (c.has_attr("classes_strings")) refuse_strings(c, "the LabelEncoder's classes_strings");
  bool key_int = false, value_int = false;
  auto keys = label_list(c, "keys", &key_int);
  auto values = label_list(c, "values", &value_int);
  if (!keys || !values) c.fail("keys and values must be given");
  if (keys->size() != values->size()) c.fail("keys and values differ in number");
  double def = value_int ? -1 : -0.f;
  if (value_int && c.has_attr("default_int64")) def = static_cast<double>(c.attr_i("default_int64", -1));
  if (!value_int && c.has_attr("default_float")) def = c.attr_f("default_float", -0.f);
  if (c.has_attr("default_tensor")) {
    auto t = c.attr_t("default_tensor");
    if (t->dtype() == DType::boolean || t->num_elements() != 1) c.fail("default_tensor must hold one number");
    def = t->at(0);
  }
  if (c.has_attr("default_string")) refuse_strings(c, "the LabelEncoder's default");
  Tensor x = c.in(0);
  DType out_dtype = value_int ? DType::i64 : DType::f32;
  if (c.has_attr("values_tensor")) out_dtype = c.attr_t("values_tensor")->dtype();
  if (keys->empty()) {
    c.out(0, g.cast(g.broadcast_like(g.scalar(def, DType::f64), x), out_dtype));
    return;
  }
  const int64_t k = static_cast<int64_t>(keys->size());
  Tensor xd = g.expand_dims(g.cast(x, DType::f64), {x.rank()});
  Tensor match = g.equal(xd, f64_const(g, *keys, {k}));  // [..., K]
  Tensor found = g.reduce_any(match, {-1});
  Tensor at = g.argmax(g.cast(match, DType::i32), x.rank());
  Tensor v = g.gather(f64_const(g, *values, {k}), at, 0);
  c.out(0, g.cast(g.select(found, v, g.scalar(def, DType::f64)), out_dtype));
}

void imputer(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  const bool ints = !is_float(x.dtype());
  std::vector<double> imputed = ints ? [&] {
    auto v = c.attr_ints("imputed_value_int64s");
    return std::vector<double>(v.begin(), v.end());
  }() : doubles_attr(c, "imputed_value_floats");
  if (imputed.empty())
    c.fail(std::string("imputed_value_") + (ints ? "int64s" : "floats") + " must be given");
  const double replaced =
      ints ? static_cast<double>(c.attr_i("replaced_value_int64", 0)) : c.attr_f("replaced_value_float", 0.f);
  Tensor value = imputed.size() == 1
                     ? scalar_like(g, imputed[0], x)
                     : g.cast(f64_const(g, imputed, {static_cast<int64_t>(imputed.size())}), x.dtype());
  Tensor hit = std::isnan(replaced) ? g.is_nan(x) : g.equal(x, scalar_like(g, replaced, x));
  c.out(0, g.select(hit, value, x));
}

void one_hot_encoder(Ctx& c) {
  Graph& g = c.g;
  if (c.has_attr("cats_strings")) refuse_strings(c, "cats_strings");
  auto cats = c.attr_ints("cats_int64s");
  if (cats.empty()) c.fail("cats_int64s must be given");
  Tensor x = c.in(0);
  Tensor xi = is_float(x.dtype()) ? g.trunc(g.cast(x, DType::f64)) : g.cast(x, DType::f64);
  std::vector<double> cd(cats.begin(), cats.end());
  Tensor hot = g.equal(g.expand_dims(xi, {x.rank()}), f64_const(g, cd, {static_cast<int64_t>(cats.size())}));
  c.out(0, g.cast(hot, DType::f32));  // a value in no category gives zeros (zeros=0 would fail at run time)
}

void feature_vectorizer(Ctx& c) {
  Graph& g = c.g;
  auto dims = c.attr_ints("inputdimensions");
  if (dims.size() != static_cast<size_t>(c.num_inputs()))
    c.fail("inputdimensions must give each input's size");
  std::vector<Tensor> parts;
  for (int i = 0; i < c.num_inputs(); ++i) {
    Tensor x = c.in(i);
    require_rank(c, x, 1, 2, "an input");
    if (x.rank() == 1) x = g.reshape(x, {1, -1});
    const int64_t have = x.shape()[1], want = dims[static_cast<size_t>(i)];
    if (have < 0 || want < 0) c.fail("the inputs' sizes must be static");
    if (have > want) x = g.slice(x, {0, 0}, {-1, want});  // longer inputs are cut, shorter padded with 0
    if (have < want) x = g.pad(g.cast(x, DType::f32), {0, 0}, {0, want - have});
    parts.push_back(g.cast(x, DType::f32));
  }
  c.out(0, g.concat(parts, 1));
}

void zip_map(Ctx& c) {
  c.fail(
      "ZipMap returns a sequence of maps and tgraph has no map type: use the scores tensor it reads "
      "(skl2onnx: convert with options={'zipmap': False})");
}

void string_normalizer(Ctx& c) {
  c.fail("StringNormalizer works on strings; tgraph has no string dtype (docs/decisions.md)");
}

// ---- tree ensembles ----

// Every tree's nodes in one table; a leaf points to itself, so a fixed number of steps ends on
// the leaves. Modes: 0 <=, 1 <, 2 >=, 3 >, 4 ==, 5 !=, 6 member of a set, 7 leaf.
struct Forest {
  std::vector<int64_t> feature, mode, yes, no, roots;
  std::vector<double> threshold;
  std::vector<uint8_t> nan_yes;
  std::vector<std::vector<double>> members;      // BRANCH_MEMBER sets, by node
  std::vector<std::map<int64_t, double>> votes;  // per node: target -> weight (leaves)
  size_t add(int64_t m) {
    feature.push_back(0), mode.push_back(m), yes.push_back(0), no.push_back(0), threshold.push_back(0);
    nan_yes.push_back(0), members.emplace_back(), votes.emplace_back();
    return feature.size() - 1;
  }
};

int64_t mode_code(const Ctx& c, const std::string& m) {
  static const char* names[] = {"BRANCH_LEQ", "BRANCH_LT",  "BRANCH_GTE",    "BRANCH_GT",
                                "BRANCH_EQ",  "BRANCH_NEQ", "BRANCH_MEMBER", "LEAF"};
  for (int64_t i = 0; i < 8; ++i)
    if (m == names[i]) return i;
  c.fail("node mode '" + m + "' is not known");
}

// The deepest root-to-leaf path, counted in comparisons; fails on cycles and bad indices.
int64_t forest_depth(const Ctx& c, const Forest& f) {
  const int64_t n = static_cast<int64_t>(f.feature.size());
  std::vector<int64_t> depth(static_cast<size_t>(n), -1);  // -2: on the current path
  std::function<int64_t(int64_t)> walk = [&](int64_t i) -> int64_t {
    if (i < 0 || i >= n) c.fail("a child index " + std::to_string(i) + " is out of range");
    auto& d = depth[static_cast<size_t>(i)];
    if (d == -2) c.fail("the trees have a cycle");
    if (d >= 0) return d;
    if (f.mode[static_cast<size_t>(i)] == 7) return d = 0;
    d = -2;
    const int64_t r = 1 + std::max(walk(f.yes[static_cast<size_t>(i)]), walk(f.no[static_cast<size_t>(i)]));
    if (r > 4096) c.fail("trees deeper than 4096 are not supported");
    return d = r;
  };
  int64_t deepest = 0;
  for (int64_t r : f.roots) deepest = std::max(deepest, walk(r));
  return deepest;
}

// Scores [N, targets] (f64): the trees' leaves for each sample, their votes aggregated.
Tensor forest_scores(Ctx& c, const Forest& f, Tensor x, int64_t targets, const std::string& aggregate,
                     const std::vector<double>& base) {
  Graph& g = c.g;
  if (f.roots.empty()) c.fail("the ensemble has no trees");
  const int64_t n = static_cast<int64_t>(f.feature.size()), trees = static_cast<int64_t>(f.roots.size());
  require_size(c, static_cast<double>(n) * static_cast<double>(targets), "the leaf table");
  for (size_t i = 0; i < f.feature.size(); ++i)
    if (f.mode[i] != 7 && (f.feature[i] < 0 || (x.shape()[1] >= 0 && f.feature[i] >= x.shape()[1])))
      c.fail("feature id " + std::to_string(f.feature[i]) + " is out of range for X " + x.shape().str());
  const int64_t steps = forest_depth(c, f);
  std::vector<bool> used(8, false);
  for (int64_t m : f.mode) used[static_cast<size_t>(m)] = true;
  // Compare in f32 when X is f32 and every threshold and set member is a float (no rounding).
  bool f32 = x.dtype() == DType::f32;
  for (double t : f.threshold) f32 = f32 && static_cast<double>(static_cast<float>(t)) == t;
  for (const auto& m : f.members)
    for (double v : m) f32 = f32 && (std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v);
  const DType dt = f32 ? DType::f32 : DType::f64;
  x = g.cast(x, dt);
  auto table = [&](const std::vector<double>& v, std::vector<int64_t> dims, DType d) {
    return g.cast(f64_const(g, v, std::move(dims)), d);
  };
  if (n >= (int64_t{1} << 31)) c.fail("the ensemble has too many nodes");
  // The walk keeps each sample's node per tree as a float (exact: f32 below 2^24 nodes), so
  // that choosing the child is fused float arithmetic; gathers take it cast to i32.
  const DType ft = n < (int64_t{1} << 24) ? DType::f32 : DType::f64;
  auto as_doubles = [](const std::vector<int64_t>& v) { return std::vector<double>(v.begin(), v.end()); };
  // x[sample, feature] is a plain gather from X flattened at sample * F + feature, computed in
  // floats (exact: f32 when the batch is static and N * F < 2^24, else f64).
  const int64_t nf = x.shape()[1], rows = x.shape()[0];
  const DType ot = rows >= 0 && nf >= 0 && rows * nf < (int64_t{1} << 24) ? DType::f32 : DType::f64;
  Tensor feat = table(as_doubles(f.feature), {n}, DType::i32), feat_f = table(as_doubles(f.feature), {n}, ot);
  Tensor yes = table(as_doubles(f.yes), {n}, ft), no = table(as_doubles(f.no), {n}, ft);
  Tensor thr = table(f.threshold, {n}, dt);
  std::vector<double> modes(f.mode.begin(), f.mode.end()), nan_yes(f.nan_yes.begin(), f.nan_yes.end());
  bool any_nan_yes = false;
  for (uint8_t v : f.nan_yes) any_nan_yes = any_nan_yes || v;
  size_t set_size = used[6] ? 1 : 0;  // an empty set holds one NaN, which equals nothing
  for (const auto& m : f.members) set_size = std::max(set_size, m.size());
  Tensor sets;
  if (set_size) {
    std::vector<double> flat;
    for (const auto& m : f.members) {
      flat.insert(flat.end(), m.begin(), m.end());
      flat.insert(flat.end(), set_size - m.size(), kNaN);  // NaN equals nothing
    }
    sets = table(flat, {n, static_cast<int64_t>(set_size)}, dt);
  }
  int used_modes = 0;
  for (int64_t k = 0; k < 7; ++k) used_modes += used[static_cast<size_t>(k)];
  const auto cmp = [&](int64_t k, Tensor a, Tensor b) -> Tensor {
    switch (k) {
      case 0: return g.less_equal(a, b);
      case 1: return g.less(a, b);
      case 2: return g.greater_equal(a, b);
      case 3: return g.greater(a, b);
      case 4: return g.equal(a, b);
      default: return g.not_equal(a, b);
    }
  };
  Tensor x_flat, row_start;
  if (nf >= 0) {
    x_flat = g.reshape(x, {-1});
    Tensor ones = g.broadcast_like(g.scalar(1, ot), g.slice(x, {0, 0}, {-1, 1}));
    row_start = g.mul(g.sub(g.cumsum(ones, 0), g.scalar(1, ot)), g.scalar(static_cast<double>(nf), ot));
  }
  // One step: each sample's node in every tree moves to its true or false child (leaves stay).
  Tensor idx = table(as_doubles(f.roots), {trees}, DType::i32);  // [T] at first, then [N, T]
  for (int64_t s = 0; s < steps && used_modes; ++s) {
    Tensor v = s == 0    ? g.gather(x, g.gather(feat, idx, 0), 1)
               : nf >= 0 ? g.gather(x_flat,
                                    g.cast(g.add(row_start, g.gather(feat_f, idx, 0)),
                                           ot == DType::f32 ? DType::i32 : DType::i64),
                                    0)
                         : g.gather_along_axis(x, g.gather(feat, idx, 0), 1);
    Tensor t = g.gather(thr, idx, 0);
    std::optional<Tensor> m, go;
    if (used_modes > 1) m = g.gather(table(modes, {n}, ft), idx, 0);
    for (int64_t k = 0; k < 7; ++k) {
      if (!used[static_cast<size_t>(k)]) continue;
      Tensor ck =
          k == 6 ? g.reduce_any(g.equal(g.expand_dims(v, {-1}), g.gather(sets, idx, 0)), {-1}) : cmp(k, v, t);
      Tensor ckf = g.cast(ck, ft);
      go = go ? g.select(g.equal(*m, g.scalar(static_cast<double>(k), ft)), ckf, *go) : ckf;
    }
    // The comparison, or NaN where missing values track the true branch (NaN != t is true).
    if (any_nan_yes) go = g.maximum(*go, g.mul(g.gather(table(nan_yes, {n}, ft), idx, 0), g.cast(g.is_nan(v), ft)));
    Tensor y = g.gather(yes, idx, 0), nn = g.gather(no, idx, 0);
    Tensor next = g.add(nn, g.mul(*go, g.sub(y, nn)));
    if (next.rank() == 1) next = g.broadcast_like(next, v);  // every tree's first step ends on a leaf
    idx = g.cast(next, DType::i32);
  }
  if (idx.rank() == 1)  // every root a leaf: [T] -> [N, T]
    idx = g.broadcast_like(
        idx, g.gather(x, table(std::vector<double>(f.roots.size(), 0), {trees}, DType::i32), 1));
  // The leaves' votes: [nodes, targets] weights and whether a node votes for the target.
  std::vector<double> w(static_cast<size_t>(n * targets), 0.0), has(static_cast<size_t>(n * targets), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (const auto& [tg, wt] : f.votes[static_cast<size_t>(i)]) {
      if (tg < 0 || tg >= targets)
        c.fail("target id " + std::to_string(tg) + " is out of range for " + std::to_string(targets) +
               " targets");
      w[static_cast<size_t>(i * targets + tg)] += wt;
      has[static_cast<size_t>(i * targets + tg)] = 1;
    }
  Tensor vals = g.gather(f64_const(g, w, {n, targets}), idx, 0);  // [N, T, targets]
  if (!base.empty() && base.size() != static_cast<size_t>(targets))
    c.fail("base_values must number " + std::to_string(targets));
  auto plus_base = [&](Tensor r) { return base.empty() ? r : g.add(r, f64_const(g, base, {targets})); };
  // One target: a sum along the last axis (the CPU backend's fast reduction).
  Tensor sum = targets == 1 ? g.reduce_sum(g.squeeze(vals, {2}), {1}, true) : g.reduce_sum(vals, {1});
  if (aggregate == "SUM") return plus_base(sum);
  if (aggregate == "AVERAGE") return plus_base(g.div(sum, g.scalar(static_cast<double>(trees), DType::f64)));
  if (aggregate != "MIN" && aggregate != "MAX")
    c.fail("aggregate_function '" + aggregate + "' is not one of SUM, AVERAGE, MIN, MAX");
  // MIN / MAX over the trees whose leaf votes for the target; 0 (no base) where none does, as
  // onnxruntime.
  Tensor voted = g.cast(g.gather(f64_const(g, has, {n, targets}), idx, 0), DType::boolean);
  const bool mn = aggregate == "MIN";
  Tensor fill = g.scalar(
      mn ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity(), DType::f64);
  Tensor masked = g.select(voted, vals, fill);
  Tensor r = mn ? g.reduce_min(masked, {1}) : g.reduce_max(masked, {1});
  return g.select(g.reduce_any(voted, {1}), plus_base(r), g.scalar(0, DType::f64));
}

// The legacy TreeEnsembleRegressor / TreeEnsembleClassifier node lists: (tree id, node id)
// tuples, children by node id within the tree; votes from `prefix`_treeids / _nodeids / _ids /
// _weights (prefix "target" or "class").
Forest legacy_forest(const Ctx& c, const std::string& prefix) {
  Forest f;
  auto tree = c.attr_ints("nodes_treeids"), node = c.attr_ints("nodes_nodeids"),
       feat = c.attr_ints("nodes_featureids");
  auto yes = c.attr_ints("nodes_truenodeids"), no = c.attr_ints("nodes_falsenodeids");
  auto nan_yes = c.attr_ints("nodes_missing_value_tracks_true");
  auto thr = doubles_attr(c, "nodes_values", "nodes_values_as_tensor");
  std::vector<std::string> modes;
  for (const auto& a : c.node.attribute())
    if (a.name() == "nodes_modes")
      for (const auto& m : a.strings()) modes.push_back(m);
  const size_t n = tree.size();
  if (node.size() != n || modes.size() != n || yes.size() != n || no.size() != n || feat.size() != n)
    c.fail("the nodes_* attributes differ in length");
  std::map<std::pair<int64_t, int64_t>, int64_t> at;
  for (size_t i = 0; i < n; ++i) {
    if (!at.emplace(std::make_pair(tree[i], node[i]), static_cast<int64_t>(i)).second)
      c.fail("node " + std::to_string(node[i]) + " of tree " + std::to_string(tree[i]) + " is given twice");
    f.add(mode_code(c, modes[i]));
    f.feature[i] = feat[i];
    f.threshold[i] = i < thr.size() ? thr[i] : 0;
    f.nan_yes[i] = i < nan_yes.size() && nan_yes[i] != 0;
  }
  auto child = [&](size_t i, int64_t id) {
    auto it = at.find({tree[i], id});
    if (it == at.end())
      c.fail("node " + std::to_string(id) + " of tree " + std::to_string(tree[i]) + " does not exist");
    return it->second;
  };
  std::map<int64_t, int64_t> root;  // tree id -> its node 0 (else its first node)
  for (size_t i = 0; i < n; ++i) {
    if (f.mode[i] == 7) {
      f.yes[i] = f.no[i] = static_cast<int64_t>(i);
    } else {
      f.yes[i] = child(i, yes[i]);
      f.no[i] = child(i, no[i]);
    }
    if (!root.count(tree[i]) || node[i] == 0) root[tree[i]] = static_cast<int64_t>(i);
  }
  for (const auto& [t, r] : root) f.roots.push_back(r);
  auto vt = c.attr_ints(prefix + "_treeids"), vn = c.attr_ints(prefix + "_nodeids"),
       vi = c.attr_ints(prefix + "_ids");
  auto vw = doubles_attr(c, prefix + "_weights", prefix + "_weights_as_tensor");
  if (vn.size() != vt.size() || vi.size() != vt.size() || vw.size() != vt.size())
    c.fail("the " + prefix + "_* attributes differ in length");
  for (size_t k = 0; k < vt.size(); ++k) {
    auto it = at.find({vt[k], vn[k]});
    if (it == at.end())
      c.fail("a " + prefix + " weight names node " + std::to_string(vn[k]) + " of tree " +
             std::to_string(vt[k]) + ", which does not exist");
    f.votes[static_cast<size_t>(it->second)][vi[k]] += vw[k];
  }
  return f;
}

void tree_ensemble_regressor(Ctx& c) {
  const int64_t targets = c.attr_i("n_targets", 1);
  if (targets <= 0) c.fail("n_targets must be positive");
  Forest f = legacy_forest(c, "target");
  Tensor s = forest_scores(c, f, features(c, 0, true), targets, c.attr_s("aggregate_function", "SUM"),
                           doubles_attr(c, "base_values", "base_values_as_tensor"));
  s = post_transform(c, s, c.attr_s("post_transform", "NONE"));
  c.out(0, c.g.cast(s, DType::f32));
}

void tree_ensemble_classifier(Ctx& c) {
  Graph& g = c.g;
  if (c.has_attr("classlabels_strings")) refuse_strings(c, "classlabels_strings");
  auto labels = c.attr_ints("classlabels_int64s");
  if (labels.size() < 2) c.fail("classlabels_int64s must name two classes or more");
  const int64_t classes = static_cast<int64_t>(labels.size());
  Forest f = legacy_forest(c, "class");
  Tensor s = forest_scores(c, f, features(c, 0, true), classes, "SUM",
                           doubles_attr(c, "base_values", "base_values_as_tensor"));
  auto ids = c.attr_ints("class_ids");
  bool binary = classes == 2 && !ids.empty();
  for (int64_t id : ids) binary = binary && id == ids[0];
  if (binary) {  // one class voted for: [-score, score], as onnxruntime
    Tensor one = g.slice(s, {0, ids[0]}, {-1, ids[0] + 1});
    s = g.concat({g.neg(one), one}, 1);
  }
  c.out(0, labels_of(c, s, labels));  // from the scores before the transform, as onnxruntime
  c.out(1, g.cast(post_transform(c, s, c.attr_s("post_transform", "NONE")), DType::f32));
}

// TreeEnsemble (ai.onnx.ml 5): interior nodes nodes_*, leaves leaf_* in their own lists.
void tree_ensemble(Ctx& c) {
  Forest f;
  auto feat = c.attr_ints("nodes_featureids"), yes = c.attr_ints("nodes_truenodeids"),
       no = c.attr_ints("nodes_falsenodeids");
  auto yes_leaf = c.attr_ints("nodes_trueleafs"), no_leaf = c.attr_ints("nodes_falseleafs");
  auto nan_yes = c.attr_ints("nodes_missing_value_tracks_true");
  auto modes_t = c.attr_t("nodes_modes");
  auto splits = doubles_attr(c, "nodes_splits");
  auto members = doubles_attr(c, "membership_values");
  auto leaf_target = c.attr_ints("leaf_targetids");
  auto leaf_w = doubles_attr(c, "leaf_weights");
  const size_t n = feat.size();
  if (!modes_t || static_cast<size_t>(modes_t->num_elements()) != n || yes.size() != n || no.size() != n ||
      yes_leaf.size() != n || no_leaf.size() != n)
    c.fail("the nodes_* attributes differ in length");
  if (leaf_w.size() != leaf_target.size()) c.fail("leaf_targetids and leaf_weights differ in length");
  const int64_t leaves = static_cast<int64_t>(leaf_w.size());
  size_t next_set = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t m = static_cast<int64_t>(modes_t->at(static_cast<int64_t>(i)));
    if (m < 0 || m > 6) c.fail("node mode " + std::to_string(m) + " is not known");
    f.add(m);
    f.feature[i] = feat[i];
    f.threshold[i] = i < splits.size() ? splits[i] : 0;
    f.nan_yes[i] = i < nan_yes.size() && nan_yes[i] != 0;
    auto target = [&](int64_t id, int64_t leaf) {
      if (id < 0 || id >= (leaf ? leaves : static_cast<int64_t>(n)))
        c.fail("child index " + std::to_string(id) + " is out of range");
      return leaf ? static_cast<int64_t>(n) + id : id;
    };
    f.yes[i] = target(yes[i], yes_leaf[i]);
    f.no[i] = target(no[i], no_leaf[i]);
    if (m == 6) {  // the next NaN-delimited set of membership_values
      while (next_set < members.size() && !std::isnan(members[next_set]))
        f.members[i].push_back(members[next_set++]);
      ++next_set;
    }
  }
  for (int64_t l = 0; l < leaves; ++l) {
    size_t k = f.add(7);
    f.yes[k] = f.no[k] = static_cast<int64_t>(k);
    f.votes[k][leaf_target[static_cast<size_t>(l)]] += leaf_w[static_cast<size_t>(l)];
  }
  f.roots = c.attr_ints("tree_roots");
  for (int64_t r : f.roots)
    if (r < 0 || r >= static_cast<int64_t>(n)) c.fail("tree root " + std::to_string(r) + " is out of range");
  static const char* aggregates[] = {"AVERAGE", "SUM", "MIN", "MAX"};
  const int64_t agg = c.attr_i("aggregate_function", 1);
  if (agg < 0 || agg > 3) c.fail("aggregate_function " + std::to_string(agg) + " is not known");
  const int64_t targets = c.attr_i("n_targets", 1);
  if (targets <= 0) c.fail("n_targets must be positive");
  Tensor x = c.in(0);
  Tensor s = forest_scores(c, f, features(c, 0, true), targets, aggregates[agg], {});
  s = post_transform(c, s, post_transform_name(c.attr_i("post_transform", 0)));
  c.out(0, c.g.cast(s, x.dtype()));
}

}  // namespace

const std::vector<Converter>& ml_converters() {
  static const std::vector<Converter> t = {
      {"Binarizer", 1, kNewestMlOpset, binarizer, "ai.onnx.ml"},
      {"Scaler", 1, kNewestMlOpset, scaler, "ai.onnx.ml"},
      {"Normalizer", 1, kNewestMlOpset, normalizer, "ai.onnx.ml"},
      {"ArrayFeatureExtractor", 1, kNewestMlOpset, array_feature_extractor, "ai.onnx.ml"},
      {"LinearRegressor", 1, kNewestMlOpset, linear_regressor, "ai.onnx.ml"},
      {"LinearClassifier", 1, kNewestMlOpset, linear_classifier, "ai.onnx.ml"},
      {"LabelEncoder", 1, kNewestMlOpset, label_encoder, "ai.onnx.ml"},
      {"TreeEnsembleRegressor", 1, kNewestMlOpset, tree_ensemble_regressor, "ai.onnx.ml"},
      {"TreeEnsembleClassifier", 1, kNewestMlOpset, tree_ensemble_classifier, "ai.onnx.ml"},
      {"TreeEnsemble", 5, kNewestMlOpset, tree_ensemble, "ai.onnx.ml"},
      {"Imputer", 1, kNewestMlOpset, imputer, "ai.onnx.ml"},
      {"OneHotEncoder", 1, kNewestMlOpset, one_hot_encoder, "ai.onnx.ml"},
      {"FeatureVectorizer", 1, kNewestMlOpset, feature_vectorizer, "ai.onnx.ml"},
      {"ZipMap", 1, kNewestMlOpset, zip_map, "ai.onnx.ml"},
      {"StringNormalizer", 10, kNewestOpset, string_normalizer},
  };
  return t;
}

}  // namespace tg::onnx_import
