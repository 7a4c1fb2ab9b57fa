// The CPU executor: walks the optimized graph's blocks in order, runs control flow as
// ordinary loops, and keeps variable writes pending until the whole run has succeeded. The
// top-level block runs the fused schedule (fused_plan.h: elementwise chains as one loop each)
// unless TGRAPH_NO_FUSION=1, which runs every op on its own in the compiled order.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/fused_elementwise.h"
#include "backends/cpu/fused_plan.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/profile.h"
#include "core/env.h"
#include "ops/op_def.h"
#include "passes/fusion.h"
#include "runtime/executable_impl.h"
#include "runtime/graph_walk.h"
#include "runtime/run_limits.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

// Arenas are kept for the next run once freed: a fresh one would be fresh pages from the
// kernel, and faulting them in costs about as much as the run's elementwise work.
class ArenaPool {
 public:
  static ArenaPool& get() {
    static ArenaPool* pool = new ArenaPool;  // never destroyed: arenas may be freed at exit
    return *pool;
  }
  std::shared_ptr<std::byte> take(size_t bytes) {
    std::byte* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
        cached_ -= bytes;
      }
    }
    if (!p) p = new (std::align_val_t(64)) std::byte[bytes];
    return std::shared_ptr<std::byte>(p, [this, bytes](std::byte* q) { give(q, bytes); });
  }

 private:
  static constexpr size_t kMaxCached = size_t(1) << 30;
  void give(std::byte* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_ + bytes <= kMaxCached) {
        free_.emplace(bytes, p);
        cached_ += bytes;
        return;
      }
    }
    ::operator delete[](p, std::align_val_t(64));
  }
  std::mutex mu_;
  std::multimap<size_t, std::byte*> free_;
  size_t cached_ = 0;
};

struct RunState {
  const ExecutableImpl& exe;
  const GraphImpl& g;
  const CpuPlan* plan;                           // the fused schedule, or null (unfused)
  std::vector<TensorData> slots;                 // per value id
  std::map<std::string, TensorData> snapshot;    // variables at the start of the run
  std::map<std::string, TensorData> pending;     // assigns made by this run
  std::shared_ptr<std::byte> arena;              // this run's intermediates (buffer plan)
  std::map<int32_t, fast::BatchNormStats> bn;    // statistics of batch norms computed in loops
  RunLimits limits;                              // timeout, cancel, interrupts: checked per step

  const TensorData& in(int32_t v) const { return slots[static_cast<size_t>(v)]; }

  static bool truth(const TensorData& t, const char* op) {
    if (t.num_elements() != 1)
      throw Error(std::string("[") + op + "] predicate must have one element, got " + t.shape().str());
    return t.at(0) != 0.0;
  }

  // Region values move between iterations rather than being copied, so that a loop-carried
  // tensor nobody else holds stays a sole owner, which an op may then update in place (the
  // for_loop gradient's tape: one row written per iteration, not the whole tape copied).
  void bind(int32_t block, std::vector<TensorData> args) {
    const Block& b = g.blocks[static_cast<size_t>(block)];
    for (size_t i = 0; i < b.params.size(); ++i) slots[static_cast<size_t>(b.params[i])] = std::move(args[i]);
  }
  // A region's results; those defined in the region and read by nothing else are moved out.
  std::vector<TensorData> results(int32_t block) {
    const std::vector<int32_t>& rs = g.blocks[static_cast<size_t>(block)].results;
    std::vector<TensorData> out;
    for (size_t i = 0; i < rs.size(); ++i) {
      const int32_t v = rs[i];
      if (dying(v, block) && std::find(rs.begin(), rs.begin() + static_cast<long>(i), v) == rs.begin() + static_cast<long>(i))
        out.push_back(std::move(slots[static_cast<size_t>(v)]));
      else
        out.push_back(in(v));
    }
    return out;
  }
  // True when value v, defined in region `block` (not the top level, whose values the arena
  // and the fused loops manage), has a single reader: after that read nothing needs its slot.
  bool dying(int32_t v, int32_t block) const {
    return block != 0 && g.values[static_cast<size_t>(v)].block == block && !exe.uses.empty() &&
           exe.uses[static_cast<size_t>(v)] == 1;
  }

  void block(int32_t b) {
    if (b == 0 && plan) {
      for (const CpuStep& s : plan->steps) {
        limits.check();
        if (s.stats) stats(g.nodes[static_cast<size_t>(s.node)]);
        else if (s.post >= 0) post_op_step(g.nodes[static_cast<size_t>(s.node)], plan->posts[static_cast<size_t>(s.post)]);
        else if (s.node >= 0) node(g.nodes[static_cast<size_t>(s.node)]);
        else kernel(plan->kernels[static_cast<size_t>(s.kernel)]);
      }
      return;
    }
    for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes) {
      limits.check();  // between steps, so a loop that never ends still stops
      node(g.nodes[static_cast<size_t>(id)]);
    }
  }

  // The arena bytes of a top-level value, or an empty tensor when it has none.
  TensorData arena_view(int32_t v) const {
    if (!arena) return TensorData();
    int64_t off = (plan ? plan->offset : exe.arena_offset)[static_cast<size_t>(v)];
    if (off < 0) return TensorData();
    const TensorType& t = g.type(v);
    return TensorData::wrap(t.shape, t.dtype, std::shared_ptr<std::byte>(arena, arena.get() + off));
  }

  // A batch_norm_training whose output the loops compute: only its statistics here (the whole
  // op when the fast statistics do not apply; the loops then fall back to it too).
  void stats(const Node& n) {
    std::vector<TensorData> ins;
    for (int32_t v : n.inputs) ins.push_back(in(v));
    fast::BatchNormStats st;
    {
      CpuProfileScope prof("batch_norm_training (statistics)");
      if (!fast::batch_norm_stats(n, ins, st)) return node(n);
    }
    for (int k = 1; k <= 2; ++k) {
      const int32_t v = n.outputs[static_cast<size_t>(k)];
      TensorData t = arena_view(v);
      if (t.empty()) t = TensorData(g.type(v).shape, g.type(v).dtype);
      const std::vector<double>& src = k == 1 ? st.mean : st.var;
      for (size_t c = 0; c < src.size(); ++c) t.ptr<float>()[c] = static_cast<float>(src[c]);
      slots[static_cast<size_t>(v)] = std::move(t);
    }
    bn[static_cast<int32_t>(&n - g.nodes.data())] = std::move(st);
  }

  // A fused loop: its materialised members and reductions written in one pass.
  void kernel(const CpuKernel& k) {
    CpuProfileScope prof(cpu_profiling() ? "fused(" + std::to_string(k.nodes.size()) + " ops, " +
                                               std::to_string(k.reductions.size()) + " reductions)"
                                         : std::string());
    std::vector<int32_t> outs = k.outputs;
    for (int32_t r : k.reductions) outs.push_back(g.nodes[static_cast<size_t>(r)].outputs[0]);
    if (k.program) {
      std::vector<const TensorData*> leaves;
      leaves.reserve(k.leaves.size());
      for (int32_t v : k.leaves) leaves.push_back(&slots[static_cast<size_t>(v)]);
      std::vector<const fast::BatchNormStats*> bns;
      for (int32_t id : k.nodes)
        if (g.nodes[static_cast<size_t>(id)].kind == OpKind::BatchNormTraining) {
          auto it = bn.find(id);
          bns.push_back(it == bn.end() ? nullptr : &it->second);
        }
      std::vector<TensorData> res;
      res.reserve(outs.size());
      for (int32_t v : outs) {
        TensorData t = arena_view(v);
        res.push_back(t.empty() ? TensorData(g.type(v).shape, g.type(v).dtype) : std::move(t));
      }
      if (run_fused(*k.program, leaves, bns, res)) {
        for (size_t i = 0; i < outs.size(); ++i) slots[static_cast<size_t>(outs[i])] = std::move(res[i]);
        return;
      }
    }
    // Not compiled, or inputs of other types than planned: the members one by one, written to
    // the arena only at the end (an output may share bytes with an input that dies here).
    for (int32_t id : k.nodes) unfused(g.nodes[static_cast<size_t>(id)]);
    for (int32_t id : k.reductions) unfused(g.nodes[static_cast<size_t>(id)]);
    for (int32_t v : outs) {
      TensorData t = arena_view(v);
      TensorData& s = slots[static_cast<size_t>(v)];
      if (t.empty() || !(t.type() == s.type())) continue;
      std::memcpy(t.data(), s.data(), t.nbytes());
      s = std::move(t);
    }
  }

  // A convolution with its chain of elementwise ops as oneDNN post-ops, writing the chain's
  // last value; when oneDNN declines, the convolution and the chain run one op at a time.
  void post_op_step(const Node& conv, const CpuPostOps& p) {
    std::vector<TensorData> ins;
    for (int32_t v : conv.inputs) ins.push_back(in(v));
    std::vector<fast::PostOp> ops;
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const Node& u = g.nodes[static_cast<size_t>(p.ops[i])];
      fast::PostOp op;
      op.kind = u.kind;
      if (const auto* d = std::get_if<ScalarDesc>(&u.attr)) op.alpha = d->alpha;
      if (p.operands[i] >= 0) op.operand = &in(p.operands[i]);
      ops.push_back(op);
    }
    // The chain may pass a reshape: the result's bytes are the end's, under the producer's shape.
    const Shape& made = g.type(conv.outputs[0]).shape;
    const Shape& end_shape = g.type(p.end).shape;
    std::vector<TensorData> planned{arena_view(p.end)};
    if (!planned[0].empty() && !(planned[0].shape() == made)) planned[0] = planned[0].reshaped(made);
    {
      CpuProfileScope prof(cpu_profiling() ? std::string(op_name(conv.kind)) + " + " + std::to_string(ops.size()) +
                                                 " post-ops"
                                           : std::string());
      PlannedOutputs scope(planned[0].empty() ? nullptr : &planned);
      std::vector<TensorData> out;
      const bool ok = conv.kind == OpKind::MatMul ? fast::matmul(conv, ins, out, &g, &ops)
                                                  : fast::conv2d(conv, ins, out, &g, &ops);
      if (ok) {
        slots[static_cast<size_t>(p.end)] = out[0].shape() == end_shape ? std::move(out[0]) : out[0].reshaped(end_shape);
        return;
      }
    }
    if (!planned[0].empty()) planned[0] = planned[0].reshaped(end_shape);
    unfused(conv);
    // The absorbed nodes in order, and the broadcasts the chain reads through their sources
    // (those other readers compute in loops), each once.
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const int32_t b = p.through[i];
      if (b >= 0 && slots[static_cast<size_t>(b)].empty())
        unfused(g.nodes[static_cast<size_t>(g.values[static_cast<size_t>(b)].node)]);
    }
    for (int32_t id : p.absorbed) {
      const Node& a = g.nodes[static_cast<size_t>(id)];
      if (slots[static_cast<size_t>(a.outputs[0])].empty()) unfused(a);
    }
    TensorData& s = slots[static_cast<size_t>(p.end)];
    if (!planned[0].empty() && planned[0].type() == s.type()) {
      std::memcpy(planned[0].data(), s.data(), s.nbytes());
      s = planned[0];
    }
  }

  void unfused(const Node& n) {
    std::vector<TensorData> ins;
    for (int32_t v : n.inputs) ins.push_back(in(v));
    set_outputs(n, cpu_eval(g, n, ins, nullptr));
  }

  void set_outputs(const Node& n, std::vector<TensorData> out) {
    for (size_t i = 0; i < n.outputs.size(); ++i) slots[static_cast<size_t>(n.outputs[i])] = std::move(out[i]);
  }

  // ---- the hooks of the shared walk (runtime/graph_walk.h) ----
  bool has(int32_t v) const { return !slots[static_cast<size_t>(v)].empty(); }
  static TensorData constant(const Node& n) { return n.data; }
  static double host_value(const TensorData& t) { return t.at(0); }
  static TensorData index_value(int64_t i) { return TensorData::scalar(static_cast<double>(i), DType::i32); }

  void node(const Node& n) {
    if (walk_state_node(*this, n) || walk_host_control(*this, n)) return;
    std::vector<TensorData> ins;
    ins.reserve(n.inputs.size());
    for (int32_t v : n.inputs) {  // a region value read here for the last time moves in
      if (dying(v, n.block)) ins.push_back(std::move(slots[static_cast<size_t>(v)]));
      else ins.push_back(in(v));
    }
    CpuProfileScope prof(cpu_profiling() ? profile_key(n, ins) : std::string());
    set_outputs(n, cpu_eval(g, n, ins, planned_outputs(n)));
  }

  // Arena views for the node's planned outputs (top level, static shapes), or nullptr.
  std::vector<TensorData> planned_buf;
  const std::vector<TensorData>* planned_outputs(const Node& n) {
    if (!arena || n.block != 0) return nullptr;
    planned_buf.assign(n.outputs.size(), TensorData());
    bool any = false;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      planned_buf[i] = arena_view(n.outputs[i]);
      any |= !planned_buf[i].empty();
    }
    return any ? &planned_buf : nullptr;
  }

  // The profile's row for a node: its op name, with input shapes when TGRAPH_PROFILE=2.
  static std::string profile_key(const Node& n, const std::vector<TensorData>& ins) {
    std::string k = op_name(n.kind);
    if (!profiling_shapes()) return k;
    k += "(";
    for (size_t i = 0; i < ins.size(); ++i) k += (i ? "," : "") + ins[i].shape().str();
    return k + ")";
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
  CpuProfileScope prof_run("run (total)");
  check_inputs(inputs);
  const GraphImpl& g = module.graph;
  const bool fuse = !fusion_disabled();  // read per run, so a test can compare both paths
  if (fuse)
    std::call_once(cpu_plan_once, [&] { cpu_plan = std::make_shared<const CpuPlan>(plan_cpu_fusion(module)); });
  const CpuPlan* plan = fuse ? static_cast<const CpuPlan*>(cpu_plan.get()) : nullptr;
  RunState st{*this, g, plan, std::vector<TensorData>(g.values.size()), {}, {}, {}, {}, {}, {}};
  // One arena per run: every planned intermediate lives at its offset in it.
  const bool no_arena = env_flag("TGRAPH_NO_ARENA");
  const int64_t bytes = plan ? plan->arena_bytes : arena_bytes;
  if (bytes > 0 && !no_arena) st.arena = ArenaPool::get().take(static_cast<size_t>(bytes));
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
    CpuProfileScope prof("commit variables");
    std::lock_guard<std::mutex> lock(store->mu);
    for (auto& [name, value] : st.pending) store->write(name, value.clone());
  }
  return out;
}

}  // namespace tg::detail
