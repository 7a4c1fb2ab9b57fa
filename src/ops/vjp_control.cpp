// Gradient rules of control flow. A region's intermediates are not visible outside it, so a
// backward region recomputes its forward body (a clone) and differentiates the clone:
//  - if_else: an if_else on the same predicate whose branches return the gradients of the
//    values the forward regions read from outside (zeros for those a branch does not read);
//  - for_loop: the forward loop records each iteration's carried values in a tape (one
//    [trip count, ...] tensor per value, written with scatter); the backward is a for_loop
//    from the last iteration to the first that reads the tape, recomputes the body, carries
//    the cotangents of the carried values and sums those of the captured outer values;
//  - while_loop: refused (its trip count is known only once it has run).
#include <algorithm>
#include <utility>

#include "ops/builder.h"
#include "ops/vjp.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

using Pairs = std::vector<std::pair<int32_t, Tensor>>;

// Names the nodes that record a for_loop's tape inside its body: they are left out when the
// body is recomputed, and a second gradients() call reuses the tape instead of adding one.
constexpr const char* kTapeNode = "for_loop.tape";

bool is_tape(const GraphImpl& G, int32_t node) {
  return node >= 0 && G.nodes[static_cast<size_t>(node)].name == kTapeNode;
}

// Copies nodes into a block. `vmap` takes old value ids to new ones (params, earlier copies);
// values not in it (read from outside) are used as they are. Side-effecting ops (assign) are
// left out: the copy only recomputes values and must not write state a second time.
struct Cloner {
  GraphImpl& G;
  std::unordered_map<int32_t, int32_t> vmap, nmap;
  std::vector<int32_t> dropped;

  int32_t val(int32_t v) const {
    auto it = vmap.find(v);
    return it == vmap.end() ? v : it->second;
  }

  std::vector<int32_t> nodes(int32_t block, const std::vector<int32_t>& ids) {
    std::vector<int32_t> made;
    for (int32_t id : ids) {
      Node n = G.nodes[static_cast<size_t>(id)];  // copy: G.nodes grows below
      if (op_def(n.kind).has(kSideEffects)) {
        dropped.push_back(id);
        continue;
      }
      std::vector<int32_t> inputs;
      for (int32_t v : n.inputs) inputs.push_back(val(v));
      std::vector<int32_t> regions;
      for (int32_t r : n.regions) {
        int32_t nb = G.add_block(block);
        const Block src = G.blocks[static_cast<size_t>(r)];  // copy: G.blocks grows below
        for (int32_t p : src.params) vmap[p] = G.add_param(nb, G.type(p));
        nodes(nb, src.nodes);
        for (int32_t v : src.results) G.blocks[static_cast<size_t>(nb)].results.push_back(val(v));
        regions.push_back(nb);
      }
      std::vector<TensorType> declared;
      for (int32_t v : n.outputs) declared.push_back(G.type(v));
      int32_t nid =
          G.add_node(block, n.kind, std::move(inputs), n.attr, std::move(declared), std::move(regions));
      Node& m = G.nodes[static_cast<size_t>(nid)];
      m.data = n.data;
      m.name = n.name;
      for (int32_t d : n.control_deps) {
        auto it = nmap.find(d);
        if (it != nmap.end())
          m.control_deps.push_back(it->second);
        else if (std::find(dropped.begin(), dropped.end(), d) == dropped.end())
          m.control_deps.push_back(d);
      }
      for (size_t i = 0; i < n.outputs.size(); ++i) vmap[n.outputs[i]] = m.outputs[i];
      nmap[id] = nid;
      made.push_back(nid);
    }
    return made;
  }
};

struct RegionGrads {
  std::vector<Tensor> args;   // per arg; empty where no gradient flows
  std::vector<Tensor> outer;  // per requested outer value; empty where none flows
};

// Differentiates a region body inside g's current block: copies `body` (node ids of block b,
// in order) with b's first params taken to `args`, seeds the cotangents of b's first results
// with `dres` (an empty Tensor: none), and walks back to the float args and the `outer` values.
RegionGrads region_vjp(Graph& g, int32_t b, std::vector<int32_t> body, const std::vector<Tensor>& args,
                       const std::vector<Tensor>& dres, const std::vector<int32_t>& outer) {
  GraphImpl& G = g.impl();
  Cloner cl{G, {}, {}, {}};
  const std::vector<int32_t> params = G.blocks[static_cast<size_t>(b)].params;
  const std::vector<int32_t> results = G.blocks[static_cast<size_t>(b)].results;
  for (size_t i = 0; i < args.size(); ++i) cl.vmap[params[i]] = args[i].id();
  std::vector<int32_t> made = cl.nodes(g.current_block(), body);

  std::vector<char> reach(G.values.size(), 0);
  for (const Tensor& a : args)
    if (is_float(a.dtype())) reach[static_cast<size_t>(a.id())] = 1;
  for (int32_t v : outer) reach[static_cast<size_t>(v)] = 1;
  propagate_reach(G, made, reach);
  GradMap grad;
  for (size_t i = 0; i < dres.size(); ++i) {
    int32_t v = cl.val(results[i]);
    if (!dres[i].valid() || !reach[static_cast<size_t>(v)] || !is_float(G.type(v).dtype)) continue;
    auto it = grad.find(v);
    if (it == grad.end())
      grad.emplace(v, dres[i]);
    else
      it->second = g.add(it->second, dres[i]);
  }
  backprop(g, made, reach, grad, "the region's results");
  auto get = [&](int32_t v) {
    auto it = grad.find(v);
    return it != grad.end() ? it->second : Tensor();
  };
  RegionGrads out;
  for (const Tensor& a : args) out.args.push_back(is_float(a.dtype()) ? get(a.id()) : Tensor());
  for (int32_t v : outer) out.outer.push_back(get(v));
  return out;
}

// The captured values that carry gradients: float and depending on a differentiated input.
std::vector<int32_t> float_captures(const GraphImpl& G, const Node& n, const std::vector<char>& reach) {
  std::vector<int32_t> out;
  for (int32_t v : region_captures(G, n))
    if (static_cast<size_t>(v) < reach.size() && reach[static_cast<size_t>(v)] && is_float(G.type(v).dtype))
      out.push_back(v);
  return out;
}

Pairs if_else_vjp(VjpContext& c, const std::vector<char>& reach) {
  GraphImpl& G = c.g.impl();
  const std::vector<int32_t> wrt = float_captures(G, c.node, reach);
  if (wrt.empty()) return {};
  std::vector<Tensor> dres;
  for (size_t i = 0; i < c.out.size(); ++i) dres.push_back(is_float(c.out[i].dtype()) ? c.dout[i] : Tensor());
  auto branch = [&](int32_t b) {
    return [&, b](Graph& rg) {
      RegionGrads r = region_vjp(rg, b, G.blocks[static_cast<size_t>(b)].nodes, {}, dres, wrt);
      std::vector<Tensor> out;
      for (size_t i = 0; i < wrt.size(); ++i)
        out.push_back(r.outer[i].valid() ? r.outer[i] : filled_like(rg, Tensor(&G, wrt[i]), 0.0));
      return out;
    };
  };
  std::vector<Tensor> d = c.g.if_else(c.in[0], branch(c.node.regions[0]), branch(c.node.regions[1]));
  Pairs out;
  for (size_t i = 0; i < wrt.size(); ++i) out.emplace_back(wrt[i], d[i]);
  return out;
}

// lower / upper / step may be one-element tensors of any rank; the tape index needs scalars.
Tensor as_scalar(Graph& g, Tensor t) { return t.rank() == 0 ? t : g.reshape(t, {}); }

// max(0, ceil((upper - lower) / step)) for step > 0 (the loop itself rejects step <= 0).
Tensor trip_count(Graph& g, Tensor lo, Tensor hi, Tensor st) {
  Tensor num = g.sub(g.add(g.sub(hi, lo), st), g.scalar(1, DType::i32));
  return g.maximum(g.div(num, st), g.scalar(0, DType::i32));
}

// The row indices 0..T-1 (i64 [T, 1]) for a run-time T. No op makes a shape from a value,
// so they come from non_zero_indices, whose result size depends on the data: the entries
// < T of 0..cap-1, where cap (>= T) doubles in a while_loop from a one-element seed.
Tensor row_indices(Graph& g, Tensor trips) {
  Tensor t = g.cast(trips, DType::i64);
  Tensor seed =
      g.reshape(g.non_zero_indices(g.constant(TensorData::full(Shape{1}, 1.0, DType::boolean))), {-1});
  std::vector<Tensor> grown = g.while_loop(
      {seed, g.scalar(1, DType::i64)},
      [&](Graph& b, std::vector<Tensor> a) {
        return std::pair{b.less(a[1], t), a};
      },
      [&](Graph& b, std::vector<Tensor> a) {
        return std::vector{b.concat({a[0], b.add(a[0], a[1])}, 0), b.mul(a[1], b.scalar(2, DType::i64))};
      });
  return g.non_zero_indices(g.less(grown[0], t));
}

// Zeros of shape [rows, like's shape] and like's dtype.
Tensor zero_rows(Graph& g, Tensor rows, Tensor like) {
  std::vector<int64_t> dims(static_cast<size_t>(like.rank()) + 1, 1);
  dims[0] = -1;
  return g.broadcast_like(g.expand_dims(filled_like(g, like, 0.0), {0}), g.reshape(rows, dims));
}

// Makes the forward loop record its carried values: tape m gets row k = (i - lower) / step
// holding the value the body received at iteration i. The loop is changed in place (the
// tapes are extra carried values and outputs), so the forward runs once for training.
void add_tapes(Graph& g, int32_t fid, size_t n) {
  GraphImpl& G = g.impl();
  // The tape ops go before the loop and into its body, where ordering deps on ops of an open
  // control_dependency scope (made after the loop) could not be honoured; they need none.
  struct ScopeGuard {
    GraphImpl& G;
    std::vector<std::vector<int32_t>> saved = std::exchange(G.control_scopes, {});
    ~ScopeGuard() { G.control_scopes = std::move(saved); }
  } guard{G};
  const int32_t E = G.nodes[static_cast<size_t>(fid)].block,
                body = G.nodes[static_cast<size_t>(fid)].regions[0];
  const std::vector<int32_t> in = G.nodes[static_cast<size_t>(fid)].inputs;
  // The empty tapes are made before the loop: built at the end of the block, then moved.
  const size_t mark = G.blocks[static_cast<size_t>(E)].nodes.size();
  Tensor rows = row_indices(g, trip_count(g, as_scalar(g, Tensor(&G, in[0])), as_scalar(g, Tensor(&G, in[1])),
                                          as_scalar(g, Tensor(&G, in[2]))));
  std::vector<Tensor> tape0;
  for (size_t m = 0; m < n; ++m) tape0.push_back(zero_rows(g, rows, Tensor(&G, in[3 + m])));
  std::vector<int32_t>& en = G.blocks[static_cast<size_t>(E)].nodes;
  std::vector<int32_t> made(en.begin() + static_cast<long>(mark), en.end());
  en.resize(mark);
  en.insert(std::find(en.begin(), en.end(), fid), made.begin(), made.end());

  Graph bg = GraphAccess::region_graph(g, body);
  const size_t body_mark = G.blocks[static_cast<size_t>(body)].nodes.size();
  const std::vector<int32_t> params = G.blocks[static_cast<size_t>(body)].params;
  Tensor k = bg.div(bg.sub(Tensor(&G, params[0]), as_scalar(bg, Tensor(&G, in[0]))),
                    as_scalar(bg, Tensor(&G, in[2])));
  for (size_t m = 0; m < n; ++m) {
    Tensor slot(&G, G.add_param(body, tape0[m].type()));
    Tensor rec = bg.scatter(slot, k, Tensor(&G, params[1 + m]), 0, ScatterMode::set);
    G.blocks[static_cast<size_t>(body)].results.push_back(rec.id());
  }
  for (size_t i = body_mark; i < G.blocks[static_cast<size_t>(body)].nodes.size(); ++i)
    G.nodes[static_cast<size_t>(G.blocks[static_cast<size_t>(body)].nodes[i])].name = kTapeNode;

  Node& f = G.nodes[static_cast<size_t>(fid)];
  for (size_t m = 0; m < n; ++m) {
    f.inputs.push_back(tape0[m].id());
    f.outputs.push_back(static_cast<int32_t>(G.values.size()));
    G.values.push_back(Value{tape0[m].type(), fid, static_cast<int32_t>(f.outputs.size() - 1), E, {}});
  }
  InferResult r = G.infer(G.nodes[static_cast<size_t>(fid)]);
  if (!r.ok()) throw Error("[gradients] for_loop: recording the loop's tape failed: " + r.error);
}

Pairs for_loop_vjp(VjpContext& c, const std::vector<char>& reach) {
  Graph& g = c.g;
  GraphImpl& G = g.impl();
  const int32_t fid = G.values[static_cast<size_t>(c.out[0].id())].node;
  const int32_t body = c.node.regions[0];
  if (G.nodes[static_cast<size_t>(fid)].block != g.current_block())
    throw Error("[gradients] for_loop: internal error, the loop is not in the block being differentiated");
  // The body as the user built it (without tape nodes) and its carried values.
  std::vector<int32_t> nodes;
  for (int32_t id : G.blocks[static_cast<size_t>(body)].nodes)
    if (!is_tape(G, id)) nodes.push_back(id);
  size_t ntape = 0;
  for (int32_t v : G.blocks[static_cast<size_t>(body)].results)
    ntape += is_tape(G, G.values[static_cast<size_t>(v)].node);
  const size_t n = c.out.size() - ntape;
  const std::vector<int32_t> wrt = float_captures(G, c.node, reach);
  if (ntape == 0) add_tapes(g, fid, n);
  std::vector<Tensor> tapes;
  for (size_t m = 0; m < n; ++m) tapes.emplace_back(&G, G.nodes[static_cast<size_t>(fid)].outputs[n + m]);

  std::vector<size_t> fl;  // carried values that carry cotangents
  for (size_t m = 0; m < n; ++m)
    if (is_float(c.in[3 + m].dtype())) fl.push_back(m);
  std::vector<Tensor> init;
  for (size_t m : fl) init.push_back(c.dout[m]);
  for (int32_t v : wrt) init.push_back(filled_like(g, Tensor(&G, v), 0.0));
  Tensor lo = as_scalar(g, c.in[0]), st = as_scalar(g, c.in[2]);
  Tensor trips = trip_count(g, lo, as_scalar(g, c.in[1]), st);
  const DType i32 = DType::i32;
  std::vector<Tensor> res = g.for_loop(
      g.scalar(0, i32), trips, g.scalar(1, i32), init, [&](Graph& rg, Tensor j, std::vector<Tensor> a) {
        Tensor k = rg.sub(rg.sub(trips, rg.scalar(1, i32)), j);  // last iteration first
        std::vector<Tensor> args{rg.add(lo, rg.mul(k, st))};
        for (const Tensor& t : tapes) args.push_back(rg.gather(t, k, 0));
        std::vector<Tensor> dres(n);
        for (size_t q = 0; q < fl.size(); ++q) dres[fl[q]] = a[q];
        RegionGrads r = region_vjp(rg, body, nodes, args, dres, wrt);
        std::vector<Tensor> out;
        for (size_t q = 0; q < fl.size(); ++q) {
          const Tensor& d = r.args[1 + fl[q]];
          out.push_back(d.valid() ? d : filled_like(rg, a[q], 0.0));
        }
        for (size_t q = 0; q < wrt.size(); ++q) {
          const Tensor& acc = a[fl.size() + q];
          out.push_back(r.outer[q].valid() ? rg.add(acc, r.outer[q]) : acc);
        }
        return out;
      });
  Pairs out;
  for (size_t q = 0; q < fl.size(); ++q) out.emplace_back(c.in[3 + fl[q]].id(), res[q]);
  for (size_t q = 0; q < wrt.size(); ++q) out.emplace_back(wrt[q], res[fl.size() + q]);
  return out;
}

}  // namespace

std::vector<int32_t> region_captures(const GraphImpl& G, const Node& n) {
  auto inside = [&](int32_t v) {
    int32_t vb = G.values[static_cast<size_t>(v)].block;
    for (int32_t r : n.regions)
      if (G.block_within(vb, r)) return true;
    return false;
  };
  std::vector<int32_t> out, work(n.regions.begin(), n.regions.end());
  while (!work.empty()) {
    const Block& b = G.blocks[static_cast<size_t>(work.back())];
    work.pop_back();
    for (int32_t id : b.nodes) {
      const Node& m = G.nodes[static_cast<size_t>(id)];
      for (int32_t v : m.inputs)
        if (!inside(v)) out.push_back(v);
      work.insert(work.end(), m.regions.begin(), m.regions.end());
    }
    for (int32_t v : b.results)
      if (!inside(v)) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::pair<int32_t, Tensor>> control_vjp(VjpContext& c, const std::vector<char>& reach) {
  switch (c.node.kind) {
    case OpKind::IfElse: return if_else_vjp(c, reach);
    case OpKind::ForLoop: return for_loop_vjp(c, reach);
    case OpKind::WhileLoop:
      throw Error(
          "[while_loop] gradients through while_loop are not supported: the trip count is not known until "
          "the "
          "loop has run, so its iterations cannot be recorded and replayed backwards; use for_loop with a "
          "trip "
          "count (an upper bound works when the body leaves finished values unchanged)");
    default: throw Error(std::string("[gradients] no gradient rule for op '") + op_name(c.node.kind) + "'");
  }
}

}  // namespace tg::detail
