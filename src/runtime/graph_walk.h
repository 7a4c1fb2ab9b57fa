#pragma once
// The part of running a graph that every backend does alike (issue 23): what a node means when
// no kernel computes it — a placeholder fed or not, a constant, a variable's value at the start
// of the run, a read that sees this run's own assigns, an assign kept pending until the run
// has succeeded — and control flow driven from the host: an if_else runs the branch its
// predicate picks, a for_loop its trips, a while_loop until its condition is false. The CPU
// executor (backends/cpu/executor.cpp) and the CUDA one on an uncaptured run
// (backends/cuda/cuda_run_ops.cpp, cuda_run_control.cpp) both walk through here; a captured
// CUDA run lowers control flow to conditional nodes instead, which stays the backend's own.
//
// A backend's run object R holds its values of type V and provides:
//   const GraphImpl& g;  std::vector<V> slots;  std::map<std::string, V> snapshot, pending;
//   const V& in(int32_t value);          bool has(int32_t value);   (set by a feed)
//   V constant(const Node&);             bool truth(const V&, const char* op);
//   double host_value(const V&);         (its first element, on the host)
//   V index_value(int64_t);              (an i32 scalar, where the backend keeps values)
//   void bind(int32_t block, std::vector<V>);   void block(int32_t block);
//   std::vector<V> results(int32_t block);      void set_outputs(const Node&, std::vector<V>);
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/error.h"

namespace tg::detail {

/// The name of the variable whose handle is value `v`.
inline const std::string& walked_variable(const GraphImpl& g, int32_t v) {
  return std::get<NameDesc>(g.nodes[static_cast<size_t>(g.values[static_cast<size_t>(v)].node)].attr).name;
}

/// Runs n if it is a placeholder, constant, variable, read or assign; false (nothing done) for
/// any other kind.
template <class R>
bool walk_state_node(R& r, const Node& n) {
  const size_t out = n.outputs.empty() ? 0 : static_cast<size_t>(n.outputs[0]);
  switch (n.kind) {
    case OpKind::Placeholder:
      if (!r.has(n.outputs[0])) throw Error("[run] placeholder '" + n.name + "' is needed but was not fed");
      return true;
    case OpKind::Constant:
      r.slots[out] = r.constant(n);
      return true;
    case OpKind::Variable:
      r.slots[out] = r.snapshot.at(std::get<NameDesc>(n.attr).name);
      return true;
    case OpKind::ReadVariable: {
      const std::string& name = walked_variable(r.g, n.inputs[0]);
      auto it = r.pending.find(name);
      r.slots[out] = it != r.pending.end() ? it->second : r.snapshot.at(name);
      return true;
    }
    case OpKind::Assign:
      r.pending[walked_variable(r.g, n.inputs[0])] = r.in(n.inputs[1]);
      return true;
    default:
      return false;
  }
}

/// Runs an if_else, for_loop or while_loop from the host; false for any other kind. Region
/// values move from trip to trip (a loop-carried tensor nobody else holds stays a sole owner,
/// which a backend may update in place).
template <class R>
bool walk_host_control(R& r, const Node& n) {
  using V = std::decay_t<decltype(r.in(0))>;
  switch (n.kind) {
    case OpKind::IfElse: {
      const int32_t region = r.truth(r.in(n.inputs[0]), "if_else") ? n.regions[0] : n.regions[1];
      r.block(region);
      r.set_outputs(n, r.results(region));
      return true;
    }
    case OpKind::ForLoop: {
      auto scalar = [&](int32_t v) { return static_cast<int64_t>(r.host_value(r.in(v))); };
      const int64_t lo = scalar(n.inputs[0]), hi = scalar(n.inputs[1]), step = scalar(n.inputs[2]);
      if (step <= 0) throw Error("[for_loop] step must be positive, got " + std::to_string(step));
      std::vector<V> args;
      for (size_t i = 3; i < n.inputs.size(); ++i) args.push_back(r.in(n.inputs[i]));
      for (int64_t i = lo; i < hi; i += step) {
        std::vector<V> params{r.index_value(i)};
        for (V& a : args) params.push_back(std::move(a));
        r.bind(n.regions[0], std::move(params));
        r.block(n.regions[0]);
        args = r.results(n.regions[0]);
      }
      r.set_outputs(n, std::move(args));
      return true;
    }
    case OpKind::WhileLoop: {
      std::vector<V> args;
      for (int32_t v : n.inputs) args.push_back(r.in(v));
      for (;;) {
        r.bind(n.regions[0], std::move(args));
        r.block(n.regions[0]);
        std::vector<V> res = r.results(n.regions[0]);
        const bool go = r.truth(res[0], "while_loop");
        res.erase(res.begin());
        if (!go) {
          r.set_outputs(n, std::move(res));
          return true;
        }
        r.bind(n.regions[1], std::move(res));
        r.block(n.regions[1]);
        args = r.results(n.regions[1]);
      }
    }
    default:
      return false;
  }
}

}  // namespace tg::detail
