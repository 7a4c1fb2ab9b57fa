#include "convert.h"

#include <functional>
#include <map>

#include "tgraph/error.h"

namespace tgraph_tf {
namespace {

using Ins = std::vector<tg::Tensor>;
using Args = std::vector<Input>;
using Rule = std::function<Ins(tg::Graph&, const tensorflow::NodeDef&, const Args&)>;

[[noreturn]] void refuse(const tensorflow::NodeDef& n, const std::string& why) {
  throw tg::Error("[tensorflow] node '" + n.name() + "' (" + n.op() + "): " + why);
}

std::string attr_s(const tensorflow::NodeDef& n, const std::string& k, const std::string& dflt) {
  auto it = n.attr().find(k);
  return it == n.attr().end() ? dflt : it->second.s();
}

bool attr_b(const tensorflow::NodeDef& n, const std::string& k, bool dflt) {
  auto it = n.attr().find(k);
  return it == n.attr().end() ? dflt : it->second.b();
}

std::vector<int64_t> attr_ints(const tensorflow::NodeDef& n, const std::string& k) {
  std::vector<int64_t> v;
  auto it = n.attr().find(k);
  if (it != n.attr().end())
    for (int64_t x : it->second.list().i()) v.push_back(x);
  return v;
}

// The spatial entries of a 4-D attribute (strides, dilations, ksize) in data_format order.
std::vector<int64_t> spatial(const tensorflow::NodeDef& n, const std::string& k, bool nchw) {
  std::vector<int64_t> v = attr_ints(n, k);
  if (v.empty()) return {1, 1};
  if (v.size() != 4) refuse(n, k + " must have 4 entries");
  return nchw ? std::vector<int64_t>{v[2], v[3]} : std::vector<int64_t>{v[1], v[2]};
}

bool nchw_of(const tensorflow::NodeDef& n) {
  const std::string f = attr_s(n, "data_format", "NHWC");
  if (f != "NHWC" && f != "NCHW") refuse(n, "data_format '" + f + "' is not NHWC or NCHW");
  return f == "NCHW";
}

tg::PaddingStyle padding_of(const tensorflow::NodeDef& n) {
  const std::string p = attr_s(n, "padding", "VALID");
  if (p == "VALID") return tg::PaddingStyle::valid;
  if (p == "SAME") return tg::PaddingStyle::same;  // the extra row / column after, as TensorFlow's
  refuse(n, "padding '" + p + "' is not SAME or VALID");
}

tg::ConvDesc conv_desc(const tensorflow::NodeDef& n) {
  const bool nchw = nchw_of(n);
  tg::ConvDesc d;
  d.stride = spatial(n, "strides", nchw);
  d.dilation = spatial(n, "dilations", nchw);
  d.padding = padding_of(n);
  d.data_layout = nchw ? tg::Layout::nchw : tg::Layout::nhwc;
  d.weights_layout = tg::Layout::hwio;  // TensorFlow's filters are [h, w, in, out] in both formats
  return d;
}

tg::PoolDesc pool_desc(const tensorflow::NodeDef& n) {
  const bool nchw = nchw_of(n);
  tg::PoolDesc d;
  d.kernel = spatial(n, "ksize", nchw);
  d.stride = spatial(n, "strides", nchw);
  d.padding = padding_of(n);
  d.data_layout = nchw ? tg::Layout::nchw : tg::Layout::nhwc;
  return d;
}

// A reduction's axes (negative counted from the end), every axis when there are none.
std::vector<int64_t> axes_of(const std::vector<int64_t>& v, int64_t rank) {
  std::vector<int64_t> a;
  for (int64_t x : v) a.push_back(x < 0 ? x + rank : x);
  return a;
}

// One rule per op. Elementwise binaries broadcast as TensorFlow's do (numpy rules, as tgraph's).
const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> table = [] {
    std::map<std::string, Rule> t;
    auto unary = [&](const char* op, tg::Tensor (tg::Graph::*f)(tg::Tensor)) {
      t[op] = [f](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) { return Ins{(g.*f)(in.at(0).t)}; };
    };
    auto binary = [&](const char* op, tg::Tensor (tg::Graph::*f)(tg::Tensor, tg::Tensor)) {
      t[op] = [f](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) { return Ins{(g.*f)(in.at(0).t, in.at(1).t)}; };
    };
    unary("Identity", &tg::Graph::identity);
    unary("Neg", &tg::Graph::neg);
    unary("Exp", &tg::Graph::exp);
    unary("Log", &tg::Graph::log);
    unary("Sqrt", &tg::Graph::sqrt);
    unary("Rsqrt", &tg::Graph::rsqrt);
    unary("Square", &tg::Graph::square);
    unary("Tanh", &tg::Graph::tanh);
    unary("Sigmoid", &tg::Graph::sigmoid);
    unary("Relu", &tg::Graph::relu);
    binary("LogicalAnd", &tg::Graph::logical_and);  // bool, no "T": a loop's condition
    binary("LogicalOr", &tg::Graph::logical_or);
    unary("LogicalNot", &tg::Graph::logical_not);
    binary("AddV2", &tg::Graph::add);
    binary("Add", &tg::Graph::add);
    binary("Sub", &tg::Graph::sub);
    binary("Mul", &tg::Graph::mul);
    binary("RealDiv", &tg::Graph::div);
    // TensorFlow's maximum / minimum of a NaN is NaN.
    binary("Maximum", &tg::Graph::maximum_nan);
    binary("Minimum", &tg::Graph::minimum_nan);
    t["SquaredDifference"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      return Ins{g.square(g.sub(in.at(0).t, in.at(1).t))};
    };
    t["ReluGrad"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      return Ins{g.relu_grad(in.at(0).t, in.at(1).t)};  // (gradients, features): dy where features > 0
    };
    t["SigmoidGrad"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {  // (y, dy)
      const tg::Tensor y = in.at(0).t, one = g.scalar(1.0, y.dtype());
      return Ins{g.mul(in.at(1).t, g.mul(y, g.sub(one, y)))};
    };
    t["TanhGrad"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {  // (y, dy)
      const tg::Tensor y = in.at(0).t, one = g.scalar(1.0, y.dtype());
      return Ins{g.mul(in.at(1).t, g.sub(one, g.square(y)))};
    };
    t["MatMul"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      return Ins{g.matmul(in.at(0).t, in.at(1).t, attr_b(n, "transpose_a", false), attr_b(n, "transpose_b", false))};
    };
    t["BiasAdd"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      const std::string f = attr_s(n, "data_format", "NHWC");
      const tg::Tensor x = in.at(0).t, b = in.at(1).t;
      if (f == "NHWC" || x.rank() <= 2) return Ins{g.add(x, b)};  // the channels are last
      if (f != "NCHW") refuse(n, "data_format '" + f + "' is not NHWC or NCHW");
      std::vector<int64_t> shape(static_cast<size_t>(x.rank() - 1), 1);  // [C, 1, ...]
      shape[0] = -1;
      return Ins{g.add(x, g.reshape(b, shape))};
    };
    t["BiasAddGrad"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      const std::string f = attr_s(n, "data_format", "NHWC");
      const tg::Tensor dy = in.at(0).t;
      std::vector<int64_t> axes;
      const int64_t c = f == "NCHW" && dy.rank() > 2 ? 1 : dy.rank() - 1;
      for (int64_t a = 0; a < dy.rank(); ++a)
        if (a != c) axes.push_back(a);
      return Ins{g.reduce_sum(dy, axes)};
    };
    t["Conv2D"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      return Ins{g.conv2d(in.at(0).t, in.at(1).t, conv_desc(n))};
    };
    t["Conv2DBackpropInput"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      return Ins{g.conv2d_data_grad(in.at(2).t, in.at(1).t, tg::Shape(in.at(0).values), conv_desc(n))};
    };
    t["Conv2DBackpropFilter"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      return Ins{g.conv2d_weight_grad(in.at(2).t, in.at(0).t, tg::Shape(in.at(1).values), conv_desc(n))};
    };
    t["MaxPool"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      return Ins{g.max_pool2d(in.at(0).t, pool_desc(n))};
    };
    t["MaxPoolGrad"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {  // (x, y, dy)
      return Ins{g.max_pool2d_grad(in.at(2).t, in.at(0).t, pool_desc(n))};
    };
    t["Sum"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      const tg::Tensor x = in.at(0).t;
      if (in.at(1).values.empty()) return Ins{g.identity(x)};  // no axes: nothing reduced
      return Ins{g.reduce_sum(x, axes_of(in.at(1).values, x.rank()), attr_b(n, "keep_dims", false))};
    };
    t["Mean"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      const tg::Tensor x = in.at(0).t;
      if (in.at(1).values.empty()) return Ins{g.identity(x)};  // no axes: nothing reduced
      return Ins{g.reduce_mean(x, axes_of(in.at(1).values, x.rank()), attr_b(n, "keep_dims", false))};
    };
    t["Reshape"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      return Ins{g.reshape(in.at(0).t, in.at(1).values)};
    };
    binary("Pow", &tg::Graph::pow);
    unary("Reciprocal", &tg::Graph::reciprocal);
    unary("Abs", &tg::Graph::abs);
    // Grappler's arithmetic optimizer turns chains of adds placed on TGRAPH into AddN there.
    t["AddN"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      tg::Tensor sum = in.at(0).t;
      for (size_t i = 1; i < in.size(); ++i) sum = g.add(sum, in[i].t);
      return Ins{sum};
    };
    unary("Erf", &tg::Graph::erf);
    t["Erfc"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      const tg::Tensor x = in.at(0).t;
      return Ins{g.sub(g.scalar(1.0, x.dtype()), g.erf(x))};
    };
    t["BatchMatMulV2"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      return Ins{g.matmul(in.at(0).t, in.at(1).t, attr_b(n, "adj_x", false), attr_b(n, "adj_y", false))};
    };
    t["Transpose"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      return Ins{g.transpose(in.at(0).t, in.at(1).values)};
    };
    t["ExpandDims"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Args& in) {
      if (in.at(1).values.size() != 1) refuse(n, "the axis must be one value");
      int64_t a = in.at(1).values[0];
      if (a < 0) a += in.at(0).t.rank() + 1;
      return Ins{g.expand_dims(in.at(0).t, {a})};
    };
    t["Tile"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      return Ins{g.tile(in.at(0).t, in.at(1).values)};
    };
    t["LogSoftmax"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      return Ins{g.log_softmax(in.at(0).t, -1)};
    };
    // (features [batch, classes], labels [batch] int): the loss per row and its gradient.
    t["SparseSoftmaxCrossEntropyWithLogits"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      const tg::Tensor logits = in.at(0).t, labels = in.at(1).t;
      const int64_t classes = logits.shape().dims().back();
      const tg::Tensor hot = g.one_hot(labels, classes, -1, logits.dtype());
      const tg::Tensor logp = g.log_softmax(logits, -1);
      return Ins{g.neg(g.reduce_sum(g.mul(hot, logp), {1})), g.sub(g.exp(logp), hot)};
    };
    t["Softmax"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) { return Ins{g.softmax(in.at(0).t, -1)}; };
    // Comparisons (a boolean result) and select, as Keras's metrics and masks use them.
    binary("Equal", &tg::Graph::equal);
    binary("NotEqual", &tg::Graph::not_equal);
    binary("Less", &tg::Graph::less);
    binary("LessEqual", &tg::Graph::less_equal);
    binary("Greater", &tg::Graph::greater);
    binary("GreaterEqual", &tg::Graph::greater_equal);
    t["SelectV2"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {
      return Ins{g.select(in.at(0).t, in.at(1).t, in.at(2).t)};
    };
    t["RsqrtGrad"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {  // (y, dy): dy * -y^3 / 2
      const tg::Tensor y = in.at(0).t;
      return Ins{g.mul(in.at(1).t, g.mul(g.scalar(-0.5, y.dtype()), g.mul(y, g.square(y))))};
    };
    t["SqrtGrad"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {  // (y, dy): dy / (2 y)
      const tg::Tensor y = in.at(0).t;
      return Ins{g.div(in.at(1).t, g.mul(g.scalar(2.0, y.dtype()), y))};
    };
    t["DivNoNan"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Args& in) {  // 0 where the divisor is 0
      const tg::Tensor a = in.at(0).t, b = in.at(1).t, zero = g.scalar(0.0, a.dtype());
      const tg::Tensor nz = g.not_equal(b, zero);
      return Ins{g.select(nz, g.div(a, g.select(nz, b, g.scalar(1.0, b.dtype()))), zero)};
    };
    return t;
  }();
  return table;
}

}  // namespace

const std::vector<int>& value_inputs(const std::string& op) {
  static const std::map<std::string, std::vector<int>> table = {
      {"Conv2DBackpropInput", {0}}, {"Conv2DBackpropFilter", {1}}, {"Sum", {1}}, {"Mean", {1}}, {"Reshape", {1}},
      {"Transpose", {1}}, {"ExpandDims", {1}}, {"Tile", {1}}};
  static const std::vector<int> none;
  auto it = table.find(op);
  return it == table.end() ? none : it->second;
}

const std::vector<std::string>& converted_ops() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, rule] : rules()) v.push_back(name);
    return v;
  }();
  return names;
}

bool has_converter(const std::string& op) { return rules().count(op) > 0; }

std::vector<tg::Tensor> convert_node(tg::Graph& g, const tensorflow::NodeDef& n, const std::vector<Input>& in) {
  auto it = rules().find(n.op());
  if (it == rules().end()) refuse(n, "no converter for this op");
  // A shape or axes must be known as values when the graph is built: never read an empty list
  // ("no axes") where the tensor is computed at run time.
  for (int k : value_inputs(n.op()))
    if (static_cast<size_t>(k) < in.size() && !in[static_cast<size_t>(k)].known)
      refuse(n, "input " + std::to_string(k) + " (a shape or axes) is computed at run time; tgraph needs its values when it builds the graph");
  try {
    return it->second(g, n, in);
  } catch (const tg::Error& e) {
    const std::string what = e.what();
    if (what.rfind("[tensorflow]", 0) == 0) throw;
    refuse(n, what);
  }
}

}  // namespace tgraph_tf
