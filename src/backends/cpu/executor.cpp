// The CPU executor: walks the optimized graph's blocks in order, runs control flow as
// ordinary loops, and keeps variable writes pending until the whole run has succeeded.
#include <cstdlib>
#include <map>

#include "backends/cpu/kernels.h"
#include "runtime/executable_impl.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

struct RunState {
  const ExecutableImpl& exe;
  const GraphImpl& g;
  std::vector<TensorData> slots;                 // per value id
  std::map<std::string, TensorData> snapshot;    // variables at the start of the run
  std::map<std::string, TensorData> pending;     // assigns made by this run
  std::shared_ptr<std::byte> arena;              // this run's intermediates (buffer plan)

  const TensorData& in(int32_t v) const { return slots[static_cast<size_t>(v)]; }

  static bool truth(const TensorData& t, const char* op) {
    if (t.num_elements() != 1)
      throw Error(std::string("[") + op + "] predicate must have one element, got " + t.shape().str());
    return t.at(0) != 0.0;
  }

  void bind(int32_t block, const std::vector<TensorData>& args) {
    const Block& b = g.blocks[static_cast<size_t>(block)];
    for (size_t i = 0; i < b.params.size(); ++i) slots[static_cast<size_t>(b.params[i])] = args[i];
  }
  std::vector<TensorData> results(int32_t block) const {
    std::vector<TensorData> out;
    for (int32_t v : g.blocks[static_cast<size_t>(block)].results) out.push_back(in(v));
    return out;
  }

  void block(int32_t b) {
    for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes) node(g.nodes[static_cast<size_t>(id)]);
  }

  void set_outputs(const Node& n, std::vector<TensorData> out) {
    for (size_t i = 0; i < n.outputs.size(); ++i) slots[static_cast<size_t>(n.outputs[i])] = std::move(out[i]);
  }

  void node(const Node& n) {
    switch (n.kind) {
      case OpKind::Placeholder:
        if (slots[static_cast<size_t>(n.outputs[0])].empty())
          throw Error("[run] placeholder '" + n.name + "' is needed but was not fed");
        return;
      case OpKind::Constant:
        slots[static_cast<size_t>(n.outputs[0])] = n.data;
        return;
      case OpKind::Variable:
        slots[static_cast<size_t>(n.outputs[0])] = snapshot.at(std::get<NameDesc>(n.attr).name);
        return;
      case OpKind::ReadVariable: {
        const std::string& name = variable_name(n.inputs[0]);
        auto it = pending.find(name);
        slots[static_cast<size_t>(n.outputs[0])] = it != pending.end() ? it->second : snapshot.at(name);
        return;
      }
      case OpKind::Assign:
        pending[variable_name(n.inputs[0])] = in(n.inputs[1]);
        return;
      case OpKind::IfElse: {
        int32_t r = truth(in(n.inputs[0]), "if_else") ? n.regions[0] : n.regions[1];
        block(r);
        set_outputs(n, results(r));
        return;
      }
      case OpKind::ForLoop: {
        int64_t lo = static_cast<int64_t>(in(n.inputs[0]).at(0));
        int64_t hi = static_cast<int64_t>(in(n.inputs[1]).at(0));
        int64_t step = static_cast<int64_t>(in(n.inputs[2]).at(0));
        if (step <= 0) throw Error("[for_loop] step must be positive, got " + std::to_string(step));
        std::vector<TensorData> args;
        for (size_t i = 3; i < n.inputs.size(); ++i) args.push_back(in(n.inputs[i]));
        for (int64_t i = lo; i < hi; i += step) {
          std::vector<TensorData> params{TensorData::scalar(static_cast<double>(i), DType::i32)};
          params.insert(params.end(), args.begin(), args.end());
          bind(n.regions[0], params);
          block(n.regions[0]);
          args = results(n.regions[0]);
        }
        set_outputs(n, args);
        return;
      }
      case OpKind::WhileLoop: {
        std::vector<TensorData> args;
        for (int32_t v : n.inputs) args.push_back(in(v));
        for (;;) {
          bind(n.regions[0], args);
          block(n.regions[0]);
          std::vector<TensorData> r = results(n.regions[0]);
          bool go = truth(r[0], "while_loop");
          r.erase(r.begin());
          if (!go) {
            set_outputs(n, r);
            return;
          }
          bind(n.regions[1], r);
          block(n.regions[1]);
          args = results(n.regions[1]);
        }
      }
      default: {
        std::vector<TensorData> ins;
        ins.reserve(n.inputs.size());
        for (int32_t v : n.inputs) ins.push_back(in(v));
        set_outputs(n, cpu_eval(g, n, ins, planned_outputs(n)));
      }
    }
  }

  // Arena views for the node's planned outputs (top level, static shapes), or nullptr.
  std::vector<TensorData> planned_buf;
  const std::vector<TensorData>* planned_outputs(const Node& n) {
    if (!arena || n.block != 0) return nullptr;
    planned_buf.assign(n.outputs.size(), TensorData());
    bool any = false;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      int64_t off = exe.arena_offset[static_cast<size_t>(n.outputs[i])];
      if (off < 0) continue;
      const TensorType& t = g.type(n.outputs[i]);
      planned_buf[i] = TensorData::wrap(t.shape, t.dtype, std::shared_ptr<std::byte>(arena, arena.get() + off));
      any = true;
    }
    return any ? &planned_buf : nullptr;
  }

  const std::string& variable_name(int32_t v) const {
    return std::get<NameDesc>(g.nodes[static_cast<size_t>(g.values[static_cast<size_t>(v)].node)].attr).name;
  }
};

}  // namespace

void ExecutableImpl::check_inputs(const std::vector<TensorData>& inputs) const {
  if (inputs.size() != feed_types.size())
    throw Error("[run] " + std::to_string(inputs.size()) + " inputs given for " +
                std::to_string(feed_types.size()) + " feeds");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& want = feed_types[i];
    if (inputs[i].empty())
      throw Error("[run] feed '" + feed_names[i] + "' (input " + std::to_string(i) + ") is empty");
    const TensorType got = inputs[i].type();
    if (got.dtype != want.dtype || !shape_compatible(want.shape, got.shape))
      throw Error("[run] feed '" + feed_names[i] + "' (input " + std::to_string(i) + ") expects " +
                  want.str() + ", got " + got.str());
  }
}

std::vector<TensorData> ExecutableImpl::run_cpu(const std::vector<TensorData>& inputs) const {
  check_inputs(inputs);
  const GraphImpl& g = module.graph;
  RunState st{*this, g, std::vector<TensorData>(g.values.size()), {}, {}, {}};
  // One arena per run: every planned intermediate lives at its offset in it.
  static const bool no_arena = [] {
    const char* v = std::getenv("TGRAPH_NO_ARENA");
    return v && std::string(v) == "1";
  }();
  if (arena_bytes > 0 && !no_arena)
    st.arena = std::shared_ptr<std::byte>(new (std::align_val_t(64)) std::byte[static_cast<size_t>(arena_bytes)],
                                          [](std::byte* p) { ::operator delete[](p, std::align_val_t(64)); });
  {
    std::lock_guard<std::mutex> lock(store->mu);
    for (const auto& [name, id] : variables) st.snapshot[name] = store->value(name);
  }
  for (size_t i = 0; i < inputs.size(); ++i) st.slots[static_cast<size_t>(module.feeds[i])] = inputs[i];
  st.block(0);
  std::vector<TensorData> out;
  for (int32_t v : module.targets) out.push_back(st.in(v));
  // Commit only now: a run that threw above changed no variable.
  if (!st.pending.empty()) {
    std::lock_guard<std::mutex> lock(store->mu);
    for (auto& [name, value] : st.pending) store->write(name, value.clone());
  }
  return out;
}

}  // namespace tg::detail

namespace tg::detail {

std::vector<TensorData> ExecutableImpl::run(const std::vector<TensorData>& inputs) const {
  if (device.kind == Device::Kind::cuda) {
#ifdef TGRAPH_HAVE_CUDA
    return run_cuda(inputs);
#else
    throw Error("[run] this build of tgraph has no CUDA backend");
#endif
  }
  return run_cpu(inputs);
}

}  // namespace tg::detail
