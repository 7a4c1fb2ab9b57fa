#include "convert.h"

#include <functional>
#include <map>

#include "tgraph/error.h"

namespace tgraph_tf {
namespace {

using Ins = std::vector<tg::Tensor>;
using Rule = std::function<Ins(tg::Graph&, const tensorflow::NodeDef&, const Ins&)>;

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

// One rule per op. Elementwise binaries broadcast as TensorFlow's do (numpy rules, as tgraph's).
const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> table = [] {
    std::map<std::string, Rule> t;
    auto unary = [&](const char* op, tg::Tensor (tg::Graph::*f)(tg::Tensor)) {
      t[op] = [f](tg::Graph& g, const tensorflow::NodeDef&, const Ins& in) { return Ins{(g.*f)(in.at(0))}; };
    };
    auto binary = [&](const char* op, tg::Tensor (tg::Graph::*f)(tg::Tensor, tg::Tensor)) {
      t[op] = [f](tg::Graph& g, const tensorflow::NodeDef&, const Ins& in) { return Ins{(g.*f)(in.at(0), in.at(1))}; };
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
    binary("AddV2", &tg::Graph::add);
    binary("Add", &tg::Graph::add);
    binary("Sub", &tg::Graph::sub);
    binary("Mul", &tg::Graph::mul);
    binary("RealDiv", &tg::Graph::div);
    // TensorFlow's maximum / minimum of a NaN is NaN.
    binary("Maximum", &tg::Graph::maximum_nan);
    binary("Minimum", &tg::Graph::minimum_nan);
    t["SquaredDifference"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Ins& in) {
      return Ins{g.square(g.sub(in.at(0), in.at(1)))};
    };
    t["ReluGrad"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Ins& in) {
      return Ins{g.relu_grad(in.at(0), in.at(1))};  // (gradients, features): dy where features > 0
    };
    t["SigmoidGrad"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Ins& in) {  // (y, dy)
      const tg::Tensor y = in.at(0), one = g.scalar(1.0, y.dtype());
      return Ins{g.mul(in.at(1), g.mul(y, g.sub(one, y)))};
    };
    t["TanhGrad"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Ins& in) {  // (y, dy)
      const tg::Tensor y = in.at(0), one = g.scalar(1.0, y.dtype());
      return Ins{g.mul(in.at(1), g.sub(one, g.square(y)))};
    };
    t["MatMul"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Ins& in) {
      return Ins{g.matmul(in.at(0), in.at(1), attr_b(n, "transpose_a", false), attr_b(n, "transpose_b", false))};
    };
    t["BiasAdd"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Ins& in) {
      const std::string f = attr_s(n, "data_format", "NHWC");
      const tg::Tensor x = in.at(0), b = in.at(1);
      if (f == "NHWC" || x.rank() <= 2) return Ins{g.add(x, b)};  // the channels are last
      if (f != "NCHW") refuse(n, "data_format '" + f + "' is not NHWC or NCHW");
      std::vector<int64_t> shape(static_cast<size_t>(x.rank() - 1), 1);  // [C, 1, ...]
      shape[0] = -1;
      return Ins{g.add(x, g.reshape(b, shape))};
    };
    t["BiasAddGrad"] = [](tg::Graph& g, const tensorflow::NodeDef& n, const Ins& in) {
      const std::string f = attr_s(n, "data_format", "NHWC");
      const tg::Tensor dy = in.at(0);
      std::vector<int64_t> axes;
      const int64_t c = f == "NCHW" && dy.rank() > 2 ? 1 : dy.rank() - 1;
      for (int64_t a = 0; a < dy.rank(); ++a)
        if (a != c) axes.push_back(a);
      return Ins{g.reduce_sum(dy, axes)};
    };
    t["Softmax"] = [](tg::Graph& g, const tensorflow::NodeDef&, const Ins& in) { return Ins{g.softmax(in.at(0), -1)}; };
    return t;
  }();
  return table;
}

}  // namespace

const std::vector<std::string>& converted_ops() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, rule] : rules()) v.push_back(name);
    return v;
  }();
  return names;
}

std::vector<tg::Tensor> convert_node(tg::Graph& g, const tensorflow::NodeDef& n, const std::vector<tg::Tensor>& in) {
  auto it = rules().find(n.op());
  if (it == rules().end()) refuse(n, "no converter for this op");
  try {
    return it->second(g, n, in);
  } catch (const tg::Error& e) {
    const std::string what = e.what();
    if (what.rfind("[tensorflow]", 0) == 0) throw;
    refuse(n, what);
  }
}

}  // namespace tgraph_tf
