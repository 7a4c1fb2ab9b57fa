// Graph::compile and Graph::run: copy the graph, specialise feed types, run the pass
// pipeline, plan buffers, and wrap the result in an Executable.
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include "core/env.h"
#include "ops/builder.h"
#include "ops/infer.h"
#include "passes/resolve_sized.h"
#include "passes/fold_memo.h"
#include "passes/layout.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"
#include "runtime/executable_impl.h"
#include "tgraph/error.h"
#include "tgraph/executable.h"

namespace tg {
using namespace detail;

namespace detail {
std::shared_ptr<VariableStore> variable_store_of(GraphImpl& g) {
  if (!g.variable_store) g.variable_store = std::make_shared<VariableStore>();
  std::lock_guard<std::mutex> lock(g.variable_store->mu);
  for (const auto& [name, node] : g.variables)
    if (!g.variable_store->values.count(name))
      g.variable_store->values[name] = g.nodes[static_cast<size_t>(node)].data.clone();
  return g.variable_store;
}

// TGRAPH_NO_LAYOUT=1 keeps nchw convolution networks in their own layout on the CPU (read per
// compile, so a test can compare both).
bool layout_pass_disabled() {
  return env_flag("TGRAPH_NO_LAYOUT");
}

std::vector<std::vector<int64_t>> prepare_module(Module& m, const GraphImpl& g,
                                                 const std::vector<std::pair<Tensor, TensorType>>& feeds,
                                                 const std::vector<Tensor>& targets,
                                                 const std::vector<Operation>& target_ops, const CompileOptions& options,
                                                 std::vector<std::string>* feed_names,
                                                 std::vector<TensorType>* feed_types) {
  m.graph = g;
  m.graph.control_scopes.clear();
  m.dynamic_shapes = options.disable_type_inference;
  for (const auto& [t, type] : feeds) {
    if (t.graph_impl() != &g) throw Error("[compile] a feed belongs to another graph");
    int32_t node = g.values[static_cast<size_t>(t.id())].node;
    if (node < 0 || g.nodes[static_cast<size_t>(node)].kind != OpKind::Placeholder)
      throw Error("[compile] feed " + t.name() + " is not a placeholder");
    const TensorType& declared = t.type();
    if (type.dtype != declared.dtype || !shape_compatible(declared.shape, type.shape))
      throw Error("[compile] feed " + t.name() + " is declared " + declared.str() +
                  " but compiled for " + type.str());
    m.feeds.push_back(t.id());
    if (feed_names) feed_names->push_back(g.nodes[static_cast<size_t>(node)].name);
    if (feed_types) feed_types->push_back(type);
    m.graph.values[static_cast<size_t>(t.id())].type = type;
  }
  for (const Tensor& t : targets) {
    if (t.graph_impl() != &g) throw Error("[compile] a target belongs to another graph");
    if (g.values[static_cast<size_t>(t.id())].block != 0)
      throw Error("[compile] target " + t.name() + " is inside a region; return it from the region");
    m.targets.push_back(t.id());
  }
  for (const Operation& op : target_ops) {
    if (op.graph_impl() != &g) throw Error("[compile] a target operation belongs to another graph");
    m.target_ops.push_back(op.id());
  }
  // The feed types flow through inference: static feed dims specialise the graph, -1 dims
  // (what disable_type_inference callers feed) keep it dynamic, resolved at run time.
  reinfer(m.graph);
  // Sizes computed in the graph (sized_op) that these feed types fix: the ops they stand for.
  resolve_sized_ops(m.graph);
  // Each backend asks for its passes (runtime/backend.h): the CUDA one, for instance, has no
  // kernels for composite norms and losses, which become primitives.
  run_pipeline(m, backend_for(options.device.kind, "[compile] device " + options.device.str() + ":").pipeline(options));
  return options.free_output_layouts ? free_output_layouts(m) : std::vector<std::vector<int64_t>>{};
}

}  // namespace detail

Executable Graph::compile(const std::vector<std::pair<Tensor, TensorType>>& feeds,
                          const std::vector<Tensor>& targets, const std::vector<Operation>& target_ops,
                          const CompileOptions& options) {
  return detail::compile_graph(*impl_, feeds, targets, target_ops, options);
}

namespace detail {

Executable compile_graph(GraphImpl& source, const std::vector<std::pair<Tensor, TensorType>>& feeds,
                         const std::vector<Tensor>& targets, const std::vector<Operation>& target_ops,
                         const CompileOptions& options) {
  const Backend& backend = backend_for(options.device.kind, "[compile] device " + options.device.str() + ":");
  backend.check_device(options.device, options.precision, "[compile]");
  for (const auto& [name, value] : options.switches) check_switch_name(name);
  auto impl = std::make_shared<ExecutableImpl>();
  impl->device = options.device;
  impl->precision = options.precision;
  impl->switches = options.switches;
  const SwitchScope switches(impl->switches);  // the passes see them
  // What the passes fold, for a dynamic executable's copies (fold_memo.h).
  std::optional<FoldKeep> folds;
  if (std::any_of(feeds.begin(), feeds.end(), [](const auto& f) { return !f.second.shape.is_static(); }) &&
      !env_flag("TGRAPH_NO_SPECIALIZE"))
    folds.emplace();
  impl->store = variable_store_of(source);
  Module& m = impl->module;
  impl->output_perms = prepare_module(m, source, feeds, targets, target_ops, options, &impl->feed_names, &impl->feed_types);
  // Dynamic feed dims: the graph and how it was compiled, to compile it for each size met.
  std::vector<int32_t> feed_ids, target_ids, op_ids;
  for (const auto& [t, type] : feeds) feed_ids.push_back(t.id());
  for (const Tensor& t : targets) target_ids.push_back(t.id());
  for (const Operation& op : target_ops) op_ids.push_back(op.id());
  impl->specialize = specialize_source(*impl, source, feed_ids, target_ids, op_ids, options);
  if (impl->specialize && folds) impl->specialize->folds = folds->take();
  for (const Block& b : m.graph.blocks)
    for (int32_t id : b.nodes) {
      const Node& n = m.graph.nodes[static_cast<size_t>(id)];
      if (n.kind == OpKind::Variable) impl->variables[std::get<NameDesc>(n.attr).name] = id;
    }
  backend.prepare(*impl);
  return Executable(impl);
}

}  // namespace detail

namespace {
struct RunCache {
  std::mutex mu;
  std::map<std::string, Executable> by_signature;
};
}  // namespace

std::vector<TensorData> Graph::run(const std::vector<std::pair<Tensor, TensorData>>& feeds,
                                   const std::vector<Tensor>& targets,
                                   const std::vector<Operation>& target_ops) {
  std::string sig;
  std::vector<std::pair<Tensor, TensorType>> feed_types;
  std::vector<TensorData> inputs;
  for (const auto& [t, data] : feeds) {
    sig += std::to_string(t.id()) + ":" + data.type().str() + ";";
    feed_types.emplace_back(t, data.type());
    inputs.push_back(data);
  }
  sig += "|";
  for (const Tensor& t : targets) sig += std::to_string(t.id()) + ",";
  sig += "|";
  for (const Operation& o : target_ops) sig += std::to_string(o.id()) + ",";
  sig += "|" + std::to_string(impl_->nodes.size());  // a graph that grew compiles anew
  if (!run_cache_) run_cache_ = std::make_shared<RunCache>();
  auto* cache = static_cast<RunCache*>(run_cache_.get());
  Executable exe;
  {
    std::lock_guard<std::mutex> lock(cache->mu);
    auto it = cache->by_signature.find(sig);
    if (it != cache->by_signature.end()) exe = it->second;
  }
  if (!exe.valid()) {
    exe = compile(feed_types, targets, target_ops, CompileOptions{.device = Device::cpu()});
    std::lock_guard<std::mutex> lock(cache->mu);
    cache->by_signature.emplace(sig, exe);
  }
  return exe.run(inputs);
}

}  // namespace tg
