#include "backends/cpu/fused_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "backends/cpu/buffer_plan.h"
#include "backends/cpu/fused_elementwise.h"
#include "runtime/arena_allocator.h"

namespace tg::detail {
namespace {

// ew: elementwise, computed in loops; red: a reduction folded into a loop; bn: a
// batch_norm_training whose step computes statistics and whose output loops compute; post:
// computed by a convolution's step as a post-op (post_op_plan.cpp).
enum class Role : uint8_t { other, ew, red, bn, post };

constexpr int32_t kMergeWindow = 256;  // most nodes between a kernel and one merged into it
constexpr int64_t kSmall = 1 << 16;    // kernels this small merge even when they share nothing
constexpr int64_t kMaxPeriod = 4096;   // largest lcm of the reduction periods of one kernel
constexpr int64_t kAlign = 64;

int64_t aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The inputs whose data an op reads (broadcast_like and sum_to_like read only the shape of
// their second input).
std::vector<int32_t> data_inputs(const Node& n) {
  if (n.kind == OpKind::BroadcastLike || n.kind == OpKind::SumToLike || n.kind == OpKind::BroadcastTo ||
      n.kind == OpKind::BatchNormTraining)
    return {n.inputs[0]};
  return n.inputs;
}

struct Draft {
  int32_t anchor = 0;  // position of the first root: where the kernel runs
  Shape shape;
  std::set<int32_t> members;  // node ids
  std::set<int32_t> leaves;   // value ids
  std::vector<int32_t> roots;
  int64_t period = 1;
  bool dead = false;
};

// Block 0's nodes in run order, with small pure ops (per-channel statistics, reshapes of
// them, scalars) moved up to just after their inputs' producers: where they stood is
// arbitrary, and a loop that reads one would otherwise not merge with loops before it.
std::vector<int32_t> run_order(const GraphImpl& g) {
  const std::vector<int32_t>& nodes = g.blocks[0].nodes;
  std::vector<char> dep_target(g.nodes.size(), 0);
  for (const Node& n : g.nodes)
    for (int32_t d : n.control_deps) dep_target[static_cast<size_t>(d)] = 1;
  auto small = [&](int32_t v) {
    const Shape& s = g.type(v).shape;
    return s.is_static() && s.num_elements() <= kSmall;
  };
  // Sources (placeholders, constants, variables' values at the start of the run) go first.
  auto hoisted = [&](int32_t id) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    const OpDef& d = op_def(n.kind);
    if (!n.control_deps.empty() || dep_target[static_cast<size_t>(id)] || d.has(kSideEffects) ||
        d.has(kHasRegions))
      return false;
    if (d.has(kSource)) return true;
    if (d.has(kStateful) || n.inputs.empty()) return false;
    return std::all_of(n.inputs.begin(), n.inputs.end(), small) &&
           std::all_of(n.outputs.begin(), n.outputs.end(), small);
  };
  // Sort key: (index of a node that stays, 0) for nodes that stay; (the latest such index
  // among the inputs' keys, 1 + own index) for moved ones, which keeps producers first.
  std::vector<std::pair<int64_t, int64_t>> key(g.nodes.size(), {-1, 0});
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int32_t id = nodes[i];
    if (!hoisted(id)) {
      key[static_cast<size_t>(id)] = {static_cast<int64_t>(i), 0};
      continue;
    }
    int64_t major = -1;
    for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs) {
      int32_t p = g.values[static_cast<size_t>(v)].node;
      if (p >= 0 && g.nodes[static_cast<size_t>(p)].block == 0)
        major = std::max(major, key[static_cast<size_t>(p)].first);
    }
    key[static_cast<size_t>(id)] = {major, 1 + static_cast<int64_t>(i)};
  }
  std::vector<int32_t> order = nodes;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return key[static_cast<size_t>(a)] < key[static_cast<size_t>(b)];
  });
  return order;
}

struct Planner {
  const Module& m;
  const GraphImpl& g;
  const std::vector<int32_t> order;
  std::vector<int32_t> pos;
  std::vector<Role> role;
  std::vector<int64_t> period;
  std::vector<char> mat;                    // per value: an elementwise result kept in memory
  std::vector<std::vector<int32_t>> users;  // per value: nodes reading it (any block)
  std::vector<char> external;               // per value: a target or a region result
  std::vector<Draft> drafts;
  std::vector<int32_t> kernel_of;  // per node: the draft computing it as a root, or -1
  std::vector<CpuPostOps> posts;
  std::vector<int32_t> post_of;    // per node: the convolution's entry in posts, or -1
  std::set<std::pair<int32_t, int32_t>> through;  // (post-op, broadcast value it reads as its source)

  explicit Planner(const Module& mod) : m(mod), g(mod.graph), order(run_order(mod.graph)) {
    const size_t nn = g.nodes.size(), nv = g.values.size();
    pos.assign(nn, -1);
    role.assign(nn, Role::other);
    period.assign(nn, 0);
    kernel_of.assign(nn, -1);
    mat.assign(nv, 0);
    users.resize(nv);
    external.assign(nv, 0);
    for (size_t i = 0; i < order.size(); ++i) pos[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
    std::vector<char> dep_target(nn, 0);
    for (const Block& b : g.blocks) {
      for (int32_t id : b.nodes) {
        const Node& n = g.nodes[static_cast<size_t>(id)];
        for (int32_t v : n.inputs) users[static_cast<size_t>(v)].push_back(id);
        for (int32_t d : n.control_deps) dep_target[static_cast<size_t>(d)] = 1;
      }
      for (int32_t v : b.results) external[static_cast<size_t>(v)] = 1;
    }
    for (int32_t v : m.targets) external[static_cast<size_t>(v)] = 1;
    for (int32_t id : order) {
      const Node& n = g.nodes[static_cast<size_t>(id)];
      if (!n.control_deps.empty() || dep_target[static_cast<size_t>(id)] || n.outputs.empty()) continue;
      bool shapes = true;
      for (int32_t v : n.inputs) shapes &= g.type(v).shape.is_static();
      for (int32_t v : n.outputs) shapes &= g.type(v).shape.is_static();
      if (!shapes) continue;
      if (batch_norm_candidate(n)) {
        role[static_cast<size_t>(id)] = Role::bn;
        period[static_cast<size_t>(id)] = g.type(n.inputs[0]).shape.dims().back();
      } else if (n.outputs.size() != 1) {
        continue;
      } else if (fused_supports(g, n)) {
        role[static_cast<size_t>(id)] = Role::ew;
      } else if (int64_t p = fused_reduction_period(g, n); p > 0) {
        role[static_cast<size_t>(id)] = Role::red;
        period[static_cast<size_t>(id)] = p;
      }
    }
    // Chains after convolutions leave the loops: their operands stay in memory for the step.
    post_of.assign(nn, -1);
    std::vector<char> ew(nn, 0);
    for (size_t i = 0; i < nn; ++i) ew[i] = role[i] == Role::ew;
    for (auto& [conv, post] : plan_post_ops(g, pos, users, external, ew)) {
      for (int32_t id : post.absorbed) role[static_cast<size_t>(id)] = Role::post;
      for (size_t i = 0; i < post.ops.size(); ++i)
        if (post.through[i] >= 0) through.insert({post.ops[i], post.through[i]});
      post_of[static_cast<size_t>(conv)] = static_cast<int32_t>(posts.size());
      posts.push_back(std::move(post));
    }
  }

  const Shape& shape(int32_t v) const { return g.type(v).shape; }

  // batch_norm_training of f32 over the last axis (its statistics step is fast_norm.cpp's).
  bool batch_norm_candidate(const Node& n) const {
    const auto* d = std::get_if<NormDesc>(&n.attr);
    if (n.kind != OpKind::BatchNormTraining || !d || n.inputs.size() != 3 || n.outputs.size() != 3)
      return false;
    for (int32_t v : n.inputs)
      if (g.type(v).dtype != DType::f32) return false;
    const int64_t r = shape(n.inputs[0]).rank();
    return r >= 1 && (d->axis == r - 1 || d->axis == -1) && shape(n.inputs[0]).dims().back() <= kMaxPeriod;
  }

  // True when v is computed inside loops (an elementwise result or a batch norm's output)
  // rather than read from memory.
  bool in_loop(int32_t v) const {
    int32_t p = g.values[static_cast<size_t>(v)].node;
    if (p < 0 || mat[static_cast<size_t>(v)]) return false;
    Role r = role[static_cast<size_t>(p)];
    return r == Role::ew || (r == Role::bn && g.nodes[static_cast<size_t>(p)].outputs[0] == v);
  }

  // True when `user` can compute its use of value v inside a loop that computes v.
  bool inlinable(int32_t v, int32_t user) const {
    const Node& u = g.nodes[static_cast<size_t>(user)];
    if (pos[static_cast<size_t>(user)] < 0) return false;
    // A batch norm's loop reads x only, but its statistics step reads gamma and beta too: a
    // computed gamma (an autocast's cast to bf16) must be stored for it.
    std::vector<int32_t> reads = u.kind == OpKind::BatchNormTraining ? u.inputs : data_inputs(u);
    if (std::find(reads.begin(), reads.end(), v) == reads.end()) return true;  // shape only
    switch (role[static_cast<size_t>(user)]) {
      case Role::ew: return shape(u.outputs[0]) == shape(v);
      case Role::red: return true;
      case Role::post: return through.count({user, v}) != 0;  // reads the broadcast's source
      default: return false;
    }
  }

  void mark_materialised() {
    // A batch norm runs whole unless every reader of its output can compute it in a loop.
    for (int32_t id : order) {
      if (role[static_cast<size_t>(id)] != Role::bn) continue;
      int32_t y = g.nodes[static_cast<size_t>(id)].outputs[0];
      bool inline_ok = !external[static_cast<size_t>(y)];
      for (int32_t u : users[static_cast<size_t>(y)]) inline_ok &= inlinable(y, u);
      if (!inline_ok) role[static_cast<size_t>(id)] = Role::other;
    }
    for (int32_t id : order) {
      if (role[static_cast<size_t>(id)] != Role::ew) continue;
      int32_t v = g.nodes[static_cast<size_t>(id)].outputs[0];
      bool keep = external[static_cast<size_t>(v)] != 0;
      for (int32_t u : users[static_cast<size_t>(v)]) keep |= !inlinable(v, u);
      mat[static_cast<size_t>(v)] = keep;
    }
  }

  // Members and leaves of the loop computing `root`.
  void collect(Draft& d, int32_t root) {
    std::vector<int32_t> stack;
    const Node& r = g.nodes[static_cast<size_t>(root)];
    if (role[static_cast<size_t>(root)] == Role::ew) d.members.insert(root);
    for (int32_t v : data_inputs(r)) stack.push_back(v);
    while (!stack.empty()) {
      int32_t v = stack.back();
      stack.pop_back();
      int32_t p = g.values[static_cast<size_t>(v)].node;
      if (in_loop(v) && shape(v) == d.shape) {
        if (d.members.insert(p).second) {
          for (int32_t w : data_inputs(g.nodes[static_cast<size_t>(p)])) stack.push_back(w);
          if (role[static_cast<size_t>(p)] == Role::bn)
            d.period = std::lcm(d.period, period[static_cast<size_t>(p)]);
        }
      } else {
        d.leaves.insert(v);
      }
    }
  }

  // The position from which value v can be read.
  int32_t avail(int32_t v) const {
    int32_t p = g.values[static_cast<size_t>(v)].node;
    if (p < 0) return -1;
    if (role[static_cast<size_t>(p)] != Role::other && kernel_of[static_cast<size_t>(p)] >= 0)
      return drafts[static_cast<size_t>(kernel_of[static_cast<size_t>(p)])].anchor;
    return pos[static_cast<size_t>(p)];
  }

  bool produces(const Draft& d, int32_t v) const {
    int32_t p = g.values[static_cast<size_t>(v)].node;
    return p >= 0 && d.members.count(p) != 0;
  }

  bool can_merge(const Draft& j, const Draft& k) const {
    if (!(j.shape == k.shape) || std::lcm(j.period, k.period) > kMaxPeriod) return false;
    bool shares = j.shape.num_elements() <= kSmall;
    for (int32_t u : k.leaves) {
      if (produces(j, u)) {
        shares = true;
        continue;
      }
      if (avail(u) >= j.anchor) return false;
      shares |= j.leaves.count(u) != 0;
    }
    for (int32_t id : k.members) {
      if (role[static_cast<size_t>(id)] == Role::bn && pos[static_cast<size_t>(id)] >= j.anchor) return false;
      shares |= j.members.count(id) != 0;
    }
    return shares;
  }

  void merge(Draft& j, Draft& k, int32_t ji) {
    j.members.insert(k.members.begin(), k.members.end());
    for (int32_t r : k.roots) {
      j.roots.push_back(r);
      kernel_of[static_cast<size_t>(r)] = ji;
    }
    std::set<int32_t> leaves;
    for (const auto* s : {&j.leaves, &k.leaves})
      for (int32_t u : *s)
        if (!produces(j, u)) leaves.insert(u);
    j.leaves = std::move(leaves);
    j.period = std::lcm(j.period, k.period);
    k.dead = true;
  }

  void form_kernels() {
    for (int32_t id : order) {
      Role r = role[static_cast<size_t>(id)];
      const Node& n = g.nodes[static_cast<size_t>(id)];
      if (r == Role::other || r == Role::post || (r == Role::ew && !mat[static_cast<size_t>(n.outputs[0])])) continue;
      if (r == Role::bn) continue;  // its output is computed by the loops that read it
      Draft d;
      d.anchor = pos[static_cast<size_t>(id)];
      d.shape = r == Role::ew ? shape(n.outputs[0]) : shape(n.inputs[0]);
      d.roots = {id};
      d.period = r == Role::red ? period[static_cast<size_t>(id)] : 1;
      collect(d, id);
      const int32_t ki = static_cast<int32_t>(drafts.size());
      kernel_of[static_cast<size_t>(id)] = ki;
      drafts.push_back(std::move(d));
      for (int32_t ji = ki - 1; ji >= 0; --ji) {
        Draft& j = drafts[static_cast<size_t>(ji)];
        if (drafts[static_cast<size_t>(ki)].anchor - j.anchor > kMergeWindow) break;
        if (j.dead || !can_merge(j, drafts[static_cast<size_t>(ki)])) continue;
        merge(j, drafts[static_cast<size_t>(ki)], ji);
        break;
      }
    }
  }

  // Full-size inputs that computing value v in a loop reads from memory.
  size_t full_leaves(int32_t v) const {
    std::set<int32_t> seen, leaves;
    std::vector<int32_t> stack{v};
    const int64_t n = shape(v).num_elements();
    while (!stack.empty()) {
      int32_t u = stack.back();
      stack.pop_back();
      if (!seen.insert(u).second) continue;
      int32_t p = g.values[static_cast<size_t>(u)].node;
      if (u == v || (in_loop(u) && shape(u) == shape(v))) {
        for (int32_t w : data_inputs(g.nodes[static_cast<size_t>(p)])) stack.push_back(w);
      } else if (shape(u).num_elements() == n) {
        leaves.insert(u);
      }
    }
    return leaves.size();
  }

  // Values recomputed in several loops from two or more full-size inputs are cheaper to
  // store once: marks them and returns whether any was found.
  bool store_shared() {
    std::vector<int> loops(g.nodes.size(), 0);
    for (const Draft& d : drafts)
      if (!d.dead)
        for (int32_t id : d.members) ++loops[static_cast<size_t>(id)];
    bool changed = false;
    for (int32_t id : order) {
      if (role[static_cast<size_t>(id)] != Role::ew || loops[static_cast<size_t>(id)] < 2) continue;
      int32_t v = g.nodes[static_cast<size_t>(id)].outputs[0];
      if (mat[static_cast<size_t>(v)] || full_leaves(v) < 2) continue;
      mat[static_cast<size_t>(v)] = 1;
      changed = true;
    }
    return changed;
  }

  void plan_kernels() {
    mark_materialised();
    for (int round = 0; round < 8; ++round) {
      drafts.clear();
      std::fill(kernel_of.begin(), kernel_of.end(), -1);
      form_kernels();
      if (!store_shared()) break;
    }
  }

  CpuPlan emit() {
    CpuPlan plan;
    plan.posts = posts;
    std::vector<int32_t> index(drafts.size(), -1);
    for (int32_t id : order) {
      Role r = role[static_cast<size_t>(id)];
      if (r == Role::post) continue;  // computed by its convolution's step
      if (r == Role::other || r == Role::bn) {
        plan.steps.push_back(CpuStep{id, -1, r == Role::bn, post_of[static_cast<size_t>(id)]});
        continue;
      }
      int32_t ki = kernel_of[static_cast<size_t>(id)];
      if (ki < 0) continue;  // computed inside the loops that read it
      Draft& d = drafts[static_cast<size_t>(ki)];
      if (d.anchor != pos[static_cast<size_t>(id)]) continue;
      CpuKernel k;
      k.shape = d.shape;
      k.nodes.assign(d.members.begin(), d.members.end());
      std::sort(k.nodes.begin(), k.nodes.end(), [&](int32_t a, int32_t b) {
        return pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)];
      });
      k.leaves.assign(d.leaves.begin(), d.leaves.end());
      for (int32_t id2 : k.nodes) {
        int32_t v = g.nodes[static_cast<size_t>(id2)].outputs[0];
        if (mat[static_cast<size_t>(v)]) k.outputs.push_back(v);
      }
      for (int32_t r2 : d.roots)
        if (role[static_cast<size_t>(r2)] == Role::red) k.reductions.push_back(r2);
      std::sort(k.reductions.begin(), k.reductions.end(), [&](int32_t a, int32_t b) {
        return pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)];
      });
      k.program = compile_fused(g, k);
      index[static_cast<size_t>(ki)] = static_cast<int32_t>(plan.kernels.size());
      plan.steps.push_back(CpuStep{-1, index[static_cast<size_t>(ki)]});
      plan.kernels.push_back(std::move(k));
    }
    return plan;
  }
};

// The arena for the fused schedule, planned as buffer_plan.cpp plans it for the node
// order: best fit among freed blocks, and an elementwise result may take the bytes of an input
// of its shape that dies at its step (a fused loop stores a tile only after reading it).
void plan_arena(const Module& m, CpuPlan& plan) {
  const GraphImpl& g = m.graph;
  const size_t nv = g.values.size();
  plan.offset.assign(nv, -1);
  const int32_t nsteps = static_cast<int32_t>(plan.steps.size());
  std::vector<int32_t> step_of_node(g.nodes.size(), -1);
  for (int32_t s = 0; s < nsteps; ++s)
    if (plan.steps[static_cast<size_t>(s)].node >= 0)
      step_of_node[static_cast<size_t>(plan.steps[static_cast<size_t>(s)].node)] = s;
  auto top_step = [&](int32_t node) {
    while (g.nodes[static_cast<size_t>(node)].block != 0)
      node = g.blocks[static_cast<size_t>(g.nodes[static_cast<size_t>(node)].block)].parent_node;
    return step_of_node[static_cast<size_t>(node)];
  };
  std::vector<int32_t> last_use(nv, -1);
  auto use = [&](int32_t v, int32_t s) {
    last_use[static_cast<size_t>(v)] = std::max(last_use[static_cast<size_t>(v)], s);
  };
  for (int32_t s = 0; s < nsteps; ++s) {
    const CpuStep& st = plan.steps[static_cast<size_t>(s)];
    if (st.node >= 0) {
      for (int32_t v : g.nodes[static_cast<size_t>(st.node)].inputs) use(v, s);
      if (st.post >= 0)
        for (int32_t v : plan.posts[static_cast<size_t>(st.post)].operands)
          if (v >= 0) use(v, s);
    } else {
      for (int32_t v : plan.kernels[static_cast<size_t>(st.kernel)].leaves) use(v, s);
    }
  }
  for (size_t b = 1; b < g.blocks.size(); ++b) {
    for (int32_t id : g.blocks[b].nodes)
      for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs) use(v, top_step(id));
    if (g.blocks[b].parent_node >= 0)
      for (int32_t v : g.blocks[b].results) use(v, top_step(g.blocks[b].parent_node));
  }
  const std::vector<char> pinned = pinned_values(m);
  auto planned = [&](int32_t v) {
    const Node& n = g.nodes[static_cast<size_t>(g.values[static_cast<size_t>(v)].node)];
    const OpDef& d = op_def(n.kind);
    return !d.has(kSource) && !d.has(kStateful) && !d.has(kHasRegions) && g.type(v).shape.is_static() &&
           !pinned[static_cast<size_t>(v)];
  };
  auto size_of = [&](int32_t v) {
    const TensorType& t = g.type(v);
    return aligned(std::max<int64_t>(1, t.shape.num_elements()) * static_cast<int64_t>(dtype_size(t.dtype)));
  };

  ArenaAllocator arena;
  std::vector<std::pair<int32_t, int32_t>> live;  // (value, last step)
  std::vector<int32_t> alias_root(nv, -1);        // per value: the value whose bytes it views
  auto place = [&](int32_t v) {
    plan.offset[static_cast<size_t>(v)] = arena.place(size_of(v));
    live.emplace_back(v, last_use[static_cast<size_t>(v)]);
  };
  // Takes the bytes of an input of v's shape and element size that dies at step s.
  auto take_dying = [&](int32_t v, const std::vector<int32_t>& inputs, int32_t s) {
    const TensorType& to = g.type(v);
    for (int32_t in : inputs) {
      const TensorType& ti = g.type(in);
      if (!(ti.shape == to.shape) || dtype_size(ti.dtype) != dtype_size(to.dtype)) continue;
      auto it = std::find_if(live.begin(), live.end(), [&](auto& e) { return e.first == in; });
      if (it == live.end() || it->second != s) continue;
      plan.offset[static_cast<size_t>(v)] = plan.offset[static_cast<size_t>(in)];
      it->first = v;
      it->second = std::max(last_use[static_cast<size_t>(v)], s);
      return true;
    }
    return false;
  };
  for (int32_t s = 0; s < nsteps; ++s) {
    const CpuStep& st = plan.steps[static_cast<size_t>(s)];
    if (st.post >= 0) {  // the chain's last value only; it may take a dying residual's bytes
      const CpuPostOps& p = plan.posts[static_cast<size_t>(st.post)];
      const std::vector<int32_t>& conv_in = g.nodes[static_cast<size_t>(st.node)].inputs;
      const bool own = p.sum >= 0 && std::find(conv_in.begin(), conv_in.end(), p.sum) == conv_in.end();
      if (planned(p.end) && !(own && take_dying(p.end, {p.sum}, s))) place(p.end);
    } else if (st.node >= 0) {
      const Node& n = g.nodes[static_cast<size_t>(st.node)];
      const bool ew = op_def(n.kind).has(kElementwise) && n.outputs.size() == 1;
      // A reshape's result is its input's bytes (the kernel then copies nothing): the same
      // offset, and the input (or the value it views) kept until the result's last reader.
      if (n.kind == OpKind::Reshape && n.outputs.size() == 1 && planned(n.outputs[0])) {
        const int32_t out = n.outputs[0], in = n.inputs[0];
        const int32_t root = alias_root[static_cast<size_t>(in)] >= 0 ? alias_root[static_cast<size_t>(in)] : in;
        auto it = std::find_if(live.begin(), live.end(), [&](auto& e) { return e.first == root; });
        if (it != live.end() && size_of(out) == size_of(root)) {
          plan.offset[static_cast<size_t>(out)] = plan.offset[static_cast<size_t>(root)];
          alias_root[static_cast<size_t>(out)] = root;
          it->second = std::max(it->second, last_use[static_cast<size_t>(out)]);
          arena.release_dead(live, s, plan.offset, size_of);
          continue;
        }
      }
      for (int32_t v : n.outputs) {
        if (!planned(v) || (st.stats && v == n.outputs[0])) continue;
        if (ew && take_dying(v, n.inputs, s)) continue;
        place(v);
      }
    } else {
      const CpuKernel& k = plan.kernels[static_cast<size_t>(st.kernel)];
      for (int32_t v : k.outputs) {
        if (!planned(v)) continue;
        if (k.program && take_dying(v, k.leaves, s)) continue;
        place(v);
      }
      for (int32_t r : k.reductions) {
        int32_t v = g.nodes[static_cast<size_t>(r)].outputs[0];
        if (planned(v)) place(v);
      }
    }
    arena.release_dead(live, s, plan.offset, size_of);
  }
  plan.arena_bytes = arena.bytes();
}

}  // namespace

CpuPlan plan_cpu_fusion(const Module& m) {
  Planner p(m);
  p.plan_kernels();
  CpuPlan plan = p.emit();
  plan_arena(m, plan);
  return plan;
}

}  // namespace tg::detail
