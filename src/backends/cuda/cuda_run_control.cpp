// Run's control flow (Run is declared in cuda_run.h): if_else, for_loop and while_loop run
// from the host on an uncaptured run, or are lowered to CUDA graph conditional nodes while a
// run is captured (cuda_control_flow.h holds the graph plumbing, control_kernels.h the kernel
// that carries values and sets the conditions on the device).
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/control_kernels.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_control_flow.h"
#include "backends/cuda/cuda_run.h"
#include "core/env.h"
#include "passes/loop_donation.h"
#include "runtime/graph_walk.h"
#include "tgraph/error.h"

namespace tg::detail::cuda_run {

// ---- control flow ----
// An uncaptured run (the first run, dynamic shapes) reads predicates and trip counts on the
// host; a captured run lowers each construct to CUDA graph conditional nodes instead.
bool Run::truth(const DevTensor& t, const char* op) {
  TensorData h = fetch(t);
  if (h.num_elements() != 1)
    throw Error(std::string("[") + op + "] predicate must have one element, got " + h.shape().str());
  return h.at(0) != 0.0;
}

void Run::bind(int32_t b, const std::vector<DevTensor>& args) {
  const Block& blk = g.blocks[static_cast<size_t>(b)];
  for (size_t i = 0; i < blk.params.size(); ++i) slots[static_cast<size_t>(blk.params[i])] = args[i];
}

std::vector<DevTensor> Run::results(int32_t b) {
  std::vector<DevTensor> r;
  for (int32_t v : g.blocks[static_cast<size_t>(b)].results) r.push_back(in(v));
  return r;
}

void Run::set_outputs(const Node& n, const std::vector<DevTensor>& r) {
  for (size_t i = 0; i < n.outputs.size(); ++i) slots[static_cast<size_t>(n.outputs[i])] = r[i];
}

void Run::control(const Node& n) {
  if (capturing()) {
    if (n.kind == OpKind::IfElse) captured_if(n);
    else if (n.kind == OpKind::ForLoop) captured_for(n);
    else captured_while(n);
    return;
  }
  walk_host_control(*this, n);  // runtime/graph_walk.h: predicates and trip counts read on the host
}

// ---- control flow captured as conditional nodes ----
// Values that cross a region boundary live in fixed state buffers. One control kernel at the
// end of each body copies the region's results into them and sets the node's handle from
// the predicate on the device. A variable assigned inside a node gets a state buffer too:
// reads see it, and each body ends by copying the variable's latest value into it.

DeviceScalar Run::scalar_of(const DevTensor& t, const char* op, const char* what) {
  if (t.type.shape.num_elements() != 1)
    throw Error(std::string("[") + op + "] " + what + " must have one element, got " + t.type.shape.str());
  return DeviceScalar{t.buf.get(), static_cast<int>(dtype_size(t.type.dtype)), is_float(t.type.dtype),
                      is_signed_integer(t.type.dtype)};
}

ControlCond Run::set_truth(const DevTensor& pred, cudaGraphConditionalHandle h, const char* op) {
  ControlCond c;
  c.op = CondOp::truth;
  c.handle = h;
  c.pred = scalar_of(pred, op, "predicate");
  return c;
}

// Copies values into state buffers of the same types (a loop may not change them).
std::vector<Run::Copy> Run::carry(const std::vector<DevTensor>& state, const std::vector<DevTensor>& values,
                                  const char* op) {
  std::vector<Copy> c;
  for (size_t i = 0; i < state.size(); ++i) {
    if (!(state[i].type == values[i].type))
      throw Error(std::string("[") + op + "] graph capture: value " + std::to_string(i) + " is " +
                  values[i].type.str() + " here but " + state[i].type.str() + " elsewhere");
    c.push_back({state[i].buf.get(), values[i].buf.get(), state[i].nbytes()});
  }
  return c;
}

// Enqueues the copies as one parallel assignment (a source that the same launch overwrites is
// staged through a temporary first), then `cond`.
void Run::control_kernel(std::vector<Copy> copies, ControlCond cond) {
  std::vector<Copy> todo, stage;
  std::set<const void*> written;
  for (const Copy& c : copies)
    if (c.bytes && c.dst != c.src) todo.push_back(c);
  for (const Copy& c : todo) written.insert(c.dst);
  if (cond.index) written.insert(cond.index);
  if (cond.ctl) written.insert(cond.ctl);
  auto staged = [&](const void* src, size_t bytes) -> const void* {
    if (!written.count(src)) return src;
    void* tmp = buffer(bytes).get();  // graph memory: kept alive by the capture
    stage.push_back({tmp, src, bytes});
    return tmp;
  };
  for (Copy& c : todo) c.src = staged(c.src, c.bytes);
  if (cond.op == CondOp::truth) cond.pred.ptr = staged(cond.pred.ptr, static_cast<size_t>(cond.pred.bytes));
  if (cond.op == CondOp::for_start)
    for (DeviceScalar* s : {&cond.lower, &cond.upper, &cond.step})
      s->ptr = staged(s->ptr, static_cast<size_t>(s->bytes));
  launch_copies(stage, ControlCond{});
  launch_copies(todo, cond);
}

void Run::launch_copies(const std::vector<Copy>& copies, const ControlCond& cond) {
  if (copies.empty() && cond.op == CondOp::none) return;
  size_t k = 0;
  for (;;) {
    ControlCopies c;
    for (; k < copies.size() && c.n < kMaxControlCopies; ++k, ++c.n) {
      c.dst[c.n] = copies[k].dst;
      c.src[c.n] = copies[k].src;
      c.bytes[c.n] = copies[k].bytes;
    }
    bool last = k == copies.size();
    TG_CUDA(launch_control(c, last ? cond : ControlCond{}, st.sm_count, stream));
    if (depth > 0) ++st.body_stats.body_control_kernels;
    if (last) return;
  }
}

// Captures `fn` into a conditional node's body graph, on the stream of the next depth.
template <class Fn>
void Run::body(cudaGraph_t graph, Fn&& fn) {
  struct Restore {
    Run& r;
    cudaStream_t outer;
    ~Restore() {
      r.stream = outer;
      --r.depth;
    }
  } restore{*this, stream};
  stream = body_stream(ctx.index(), ++depth);
  BodyCapture cap(stream, graph);
  fn();
  cap.end();
}

std::vector<std::string> Run::assigned_in(const Node& n) const {
  std::set<std::string> names;
  std::vector<int32_t> todo(n.regions.begin(), n.regions.end());
  while (!todo.empty()) {
    int32_t b = todo.back();
    todo.pop_back();
    for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes) {
      const Node& m = g.nodes[static_cast<size_t>(id)];
      if (m.kind == OpKind::Assign) names.insert(var_name(m.inputs[0]));
      todo.insert(todo.end(), m.regions.begin(), m.regions.end());
    }
  }
  return {names.begin(), names.end()};
}

// State buffers for the variables `n` assigns, with the copies of their current values.
std::vector<Run::VarState> Run::var_states(const Node& n, std::vector<Copy>& init) {
  std::vector<VarState> vs;
  for (const std::string& name : assigned_in(n)) {
    auto it = pending.find(name);
    const DevTensor& cur = it != pending.end() ? it->second : snapshot.at(name);
    vs.push_back({name, alloc(cur.type)});
    init.push_back({vs.back().buf.buf.get(), cur.buf.get(), cur.nbytes()});
  }
  reset_vars(vs);
  return vs;
}

void Run::reset_vars(const std::vector<VarState>& vs) {
  for (const VarState& v : vs) pending[v.name] = v.buf;
}

void Run::save_vars(const std::vector<VarState>& vs, std::vector<Copy>& out) {
  for (const VarState& v : vs) {
    const DevTensor& cur = pending.at(v.name);
    out.push_back({v.buf.buf.get(), cur.buf.get(), v.buf.nbytes()});
  }
}

// IF node with an ELSE body; each branch ends by copying its results into the outputs.
void Run::captured_if(const Node& n) {
  std::vector<Copy> init;
  std::vector<VarState> vars = var_states(n, init);
  cudaGraphConditionalHandle h = new_cond_handle(stream);
  control_kernel(init, set_truth(in(n.inputs[0]), h, "if_else"));
  std::array<cudaGraph_t, 2> bodies = add_cond_node(stream, h, cudaGraphCondTypeIf, 2);
  std::vector<DevTensor> outs;
  for (size_t k = 0; k < 2; ++k) {
    int32_t r = n.regions[k];
    body(bodies[k], [&] {
      block(r);
      std::vector<DevTensor> res = results(r);
      if (k == 0)
        for (const DevTensor& t : res) outs.push_back(alloc(t.type));
      std::vector<Copy> copies = carry(outs, res, "if_else");
      save_vars(vars, copies);
      control_kernel(copies, ControlCond{});
      reset_vars(vars);
    });
  }
  set_outputs(n, outs);
}

// What a loop body captured with `blocks` computes in place (passes/loop_donation.h). Nothing
// when the body assigns variables (their state copies read buffers at the end of the trip) or
// a matmul epilogue moves steps out of plan order; the predicate's kernel may still set the
// condition. TGRAPH_NO_LOOP_IN_PLACE=1 turns both off (every trip ends with a control kernel that
// copies the results and sets the condition), to compare or to rule them out.
InPlace Run::in_place_for(const std::vector<int32_t>& blocks, size_t first_param, size_t first_result,
                          const std::vector<DevTensor>& state, bool assigns, cudaGraphConditionalHandle h) {
  InPlace ip;
  const bool off = env_flag("TGRAPH_NO_LOOP_IN_PLACE");
  if (off) return ip;
  bool plain = !assigns;
  std::vector<const FusionPlan*> plans;
  for (int32_t b : blocks) {
    plans.push_back(&plan(b));
    for (const EpilogueMatch& e : epilogues(b)) plain &= e.kind == MatmulShape::Epilogue::none && !e.runs_at_matmul;
  }
  LoopDonation d = plan_loop_donation(g, blocks, plans, first_param, first_result, plain);
  ip.handle = h;
  ip.predicate = d.predicate;
  for (size_t k = 0; k < d.into.size(); ++k)
    if (d.into[k] >= 0)
      ip.into[d.into[k]] = InPlace::Target{state[k], std::set<int32_t>(d.old[k].begin(), d.old[k].end())};
  return ip;
}

// Sets the loop body whose kernels may write in place, restoring the enclosing one (a loop
// nested in the body) on the way out, exceptions included.
struct InPlaceScope {
  Run& r;
  InPlace* outer;
  InPlaceScope(Run& run, InPlace& ip) : r(run), outer(std::exchange(run.in_place, &ip)) {}
  ~InPlaceScope() { r.in_place = outer; }
};

// A kernel sets index = lower and the handle; the WHILE body runs the region on the state
// buffers, then one kernel carries the results, steps the index and re-tests it.
void Run::captured_for(const Node& n) {
  DevTensor index = alloc(TensorType(Shape{}, DType::i32)), ctl = alloc(TensorType(Shape{2}, DType::i64));
  std::vector<DevTensor> args, init_values;
  for (size_t i = 3; i < n.inputs.size(); ++i) {
    init_values.push_back(in(n.inputs[i]));
    args.push_back(alloc(init_values.back().type));
  }
  std::vector<Copy> init = carry(args, init_values, "for_loop");
  std::vector<VarState> vars = var_states(n, init);
  cudaGraphConditionalHandle h = new_cond_handle(stream);
  ControlCond start;
  start.op = CondOp::for_start;
  start.handle = h;
  start.lower = scalar_of(in(n.inputs[0]), "for_loop", "lower");
  start.upper = scalar_of(in(n.inputs[1]), "for_loop", "upper");
  start.step = scalar_of(in(n.inputs[2]), "for_loop", "step");
  start.index = reinterpret_cast<int*>(index.buf.get());
  start.ctl = reinterpret_cast<long long*>(ctl.buf.get());
  start.error = step_flag(n.inputs[2]);
  control_kernel(init, start);
  cudaGraph_t loop = add_cond_node(stream, h, cudaGraphCondTypeWhile, 1)[0];
  InPlace ip = in_place_for({n.regions[0]}, 1, 0, args, !vars.empty(), h);
  body(loop, [&] {
    std::vector<DevTensor> params{index};
    params.insert(params.end(), args.begin(), args.end());
    bind(n.regions[0], params);
    {
      InPlaceScope scope(*this, ip);
      block(n.regions[0]);
    }
    std::vector<Copy> copies = carry(args, results(n.regions[0]), "for_loop");
    save_vars(vars, copies);
    ControlCond next;
    next.op = CondOp::for_next;
    next.handle = h;
    next.index = start.index;
    next.ctl = start.ctl;
    control_kernel(copies, next);
    reset_vars(vars);
  });
  set_outputs(n, args);
}

// Where a for_loop reports a step that is not positive (none for a positive constant step).
int* Run::step_flag(int32_t step) {
  int32_t id = g.values[static_cast<size_t>(step)].node;
  if (id >= 0) {
    const Node& src = g.nodes[static_cast<size_t>(id)];
    if (src.kind == OpKind::Constant && src.data.num_elements() == 1 && src.data.at(0) > 0) return nullptr;
  }
  if (!*loop_error) *loop_error = buffer(sizeof(int));
  return reinterpret_cast<int*>(loop_error->get());
}

// MPSGraph's while, rotated: `before` runs once ahead of the WHILE node, whose body is
// after; before. The state buffers hold before's latest results: the loop's outputs. In the
// body, results computed in place and a predicate kernel that sets the condition leave the
// end-of-trip control kernel only the copies that remain (none for a small elementwise body).
void Run::captured_while(const Node& n) {
  int32_t before = n.regions[0], after = n.regions[1];
  std::vector<DevTensor> args;
  for (int32_t v : n.inputs) args.push_back(in(v));
  bind(before, args);
  block(before);
  std::vector<DevTensor> r = results(before);
  std::vector<DevTensor> res(r.begin() + 1, r.end()), state;
  for (const DevTensor& t : res) state.push_back(alloc(t.type));
  std::vector<Copy> first = carry(state, res, "while_loop");
  std::vector<VarState> vars = var_states(n, first);  // after the first `before`'s assigns
  cudaGraphConditionalHandle h = new_cond_handle(stream);
  control_kernel(first, set_truth(r[0], h, "while_loop"));
  cudaGraph_t loop = add_cond_node(stream, h, cudaGraphCondTypeWhile, 1)[0];
  InPlace ip = in_place_for({after, before}, 0, 1, state, !vars.empty(), h);
  body(loop, [&] {
    bind(after, state);
    {
      InPlaceScope scope(*this, ip);
      block(after);
      bind(before, results(after));
      block(before);
    }
    std::vector<DevTensor> r2 = results(before);
    std::vector<Copy> copies = carry(state, std::vector<DevTensor>(r2.begin() + 1, r2.end()), "while_loop");
    save_vars(vars, copies);
    control_kernel(copies, ip.predicate_set ? ControlCond{} : set_truth(r2[0], h, "while_loop"));
    reset_vars(vars);
  });
  set_outputs(n, state);
}

}  // namespace tg::detail::cuda_run
