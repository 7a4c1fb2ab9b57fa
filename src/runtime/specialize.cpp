// An executable compiled with dynamic feed dims, run at a concrete size, runs a copy of itself
// compiled for that size (issue 22). With -1 dims the passes that decide by shape — stitched
// reductions, producer recomputation, fused loops, layouts — cannot tell which sizes are equal,
// so a dynamic BERT ran 6-8x slower on the CPU than a static one and 1.6-1.8x on the GPU
// (bench/RESULTS.md, session 16). The user still holds one executable and compiles nothing; the
// first run at a new size pays one compile (milliseconds on the CPU; on CUDA also the kernels
// that size needs, from the disk cache when seen before), later runs at that size none. After
// a new size's first run, the neighbouring size classes are compiled ahead (size_classes.h).
// TGRAPH_NO_SPECIALIZE=1 at compile time keeps the executable dynamic.
#include <algorithm>

#include "backends/cpu/profile.h"
#include "core/env.h"
#include "passes/fold_memo.h"
#include "runtime/backend.h"
#include "runtime/executable_impl.h"
#include "runtime/size_classes.h"
#include "tgraph/error.h"
#include "tgraph/executable.h"

namespace tg::detail {

std::shared_ptr<const SpecializeSource> specialize_source(const ExecutableImpl& exe, const GraphImpl& graph,
                                                          std::vector<int32_t> feeds,
                                                          std::vector<int32_t> targets,
                                                          std::vector<int32_t> ops,
                                                          const CompileOptions& options) {
  bool dynamic = false;
  for (const TensorType& t : exe.feed_types) dynamic |= !t.shape.is_static();
  if (!dynamic || env_flag("TGRAPH_NO_SPECIALIZE")) return nullptr;
  auto src = std::make_shared<SpecializeSource>();
  src->graph = graph;  // a copy: the caller may go on building (constants share their bytes)
  src->graph.variable_store = exe.store;
  src->feeds = std::move(feeds);
  src->targets = std::move(targets);
  src->ops = std::move(ops);
  src->options = options;
  src->declared = exe.feed_types;
  return src;
}

std::shared_ptr<ExecutableImpl> compile_copy(const SpecializeSource& src,
                                             const std::vector<TensorType>& types) {
  std::lock_guard<std::mutex> lock(src.compile_mu);
  auto& g = const_cast<GraphImpl&>(src.graph);  // compile reads it (its variable store is set)
  std::vector<std::pair<Tensor, TensorType>> feeds;
  for (size_t i = 0; i < src.feeds.size() && i < types.size(); ++i)
    feeds.emplace_back(Tensor(&g, src.feeds[i]), types[i]);
  std::vector<Tensor> targets;
  for (int32_t v : src.targets) targets.emplace_back(&g, v);
  std::vector<Operation> ops;
  for (int32_t n : src.ops) ops.emplace_back(&g, n);
  CompileOptions o = src.options;
  o.disable_type_inference = false;
  std::shared_ptr<ExecutableImpl> made;
  // Outermost: the copy's folds stay with the source for the next copies — the first copy's
  // only (a loaded executable's; a compiled one kept its own compile's), so sizes met later
  // (folds of a size's own, a position table's slice) do not accumulate.
  FoldKeep folds;
  try {
    made = compile_graph(g, feeds, targets, ops, o).impl_ptr();
  } catch (const Error&) {
    made = nullptr;  // a size the graph refuses statically: the dynamic run says why
  }
  if (src.folds.empty()) src.folds = folds.take();
  if (made) made->specialize = nullptr;
  const uint32_t c = size_class(src.declared, types);
  std::lock_guard<std::mutex> classes_lock(src.classes_mu);
  if (std::find(src.classes.begin(), src.classes.end(), c) == src.classes.end()) src.classes.push_back(c);
  return made;
}

std::shared_ptr<ExecutableImpl> SpecializeSource::take_ahead(const std::vector<TensorType>& types) const {
  std::lock_guard<std::mutex> lock(classes_mu);
  for (auto it = ahead.begin(); it != ahead.end(); ++it)
    if (it->first == types) {
      std::shared_ptr<ExecutableImpl> copy = std::move(it->second);
      ahead.erase(it);
      return copy;
    }
  return nullptr;
}

std::shared_ptr<ExecutableImpl> ExecutableImpl::specialized_for(const std::vector<TensorType>& types,
                                                                bool* fresh) const {
  if (!specialize) return nullptr;
  for (const TensorType& t : types)
    if (!t.shape.is_static()) return nullptr;
  // Copies evicted below are destroyed after the lock is let go: a copy's destruction may wait
  // for a library build its runs relied on (the CUDA backend's attention plans).
  std::vector<std::shared_ptr<ExecutableImpl>> evicted;
  std::lock_guard<std::mutex> lock(specialized_mu);
  for (auto it = specialized.begin(); it != specialized.end(); ++it)
    if (it->first == types) {
      specialized.splice(specialized.begin(), specialized, it);  // most recently used first
      return it->second;
    }
  std::shared_ptr<ExecutableImpl> made = specialize->take_ahead(types);
  if (made) {
    CpuProfileScope timed("new size: its copy compiled ahead, taken");  // TGRAPH_PROFILE (counted)
  } else {
    CpuProfileScope timed("new size: its copy compiled");
    made = compile_copy(*specialize, types);
  }
  // The caller reads outputs by this executable's layouts: a specialisation that chose other
  // ones is not used.
  if (made && made->output_perms != output_perms) made = nullptr;
  specialized.emplace_front(types, made);
  while (specialized.size() > kMaxSpecialized) {
    evicted.push_back(std::move(specialized.back().second));
    specialized.pop_back();
  }
  if (fresh) *fresh = made != nullptr;
  return made;
}

namespace {

// prepare_sizes_near's work: the classes near `types` not met yet, queued for the background
// thread (may throw: memory).
void queue_sizes_near(const std::shared_ptr<const SpecializeSource>& specialize, const std::vector<TensorType>& types,
                      const Backend* backend) {
  std::vector<std::vector<TensorType>> todo;
  {
    std::lock_guard<std::mutex> lock(specialize->classes_mu);
    for (auto& [c, near] : neighbour_sizes(specialize->declared, types)) {
      if (std::find(specialize->classes.begin(), specialize->classes.end(), c) != specialize->classes.end())
        continue;
      specialize->classes.push_back(c);  // (taken now: not queued twice)
      todo.push_back(std::move(near));
    }
  }
  if (todo.empty()) return;
  // The job holds the source, not this executable: destroying it meanwhile is fine.
  run_in_background([src = specialize, todo = std::move(todo), backend] {
    backend->background_thread();
    for (const std::vector<TensorType>& near : todo) try {
        std::shared_ptr<ExecutableImpl> copy;
        {
          CompilingAhead ahead;
          copy = compile_copy(*src, near);
        }
        if (!copy) continue;
        const SwitchScope switches(copy->switches);
        backend->prefetch_kernels(*copy);
        std::shared_ptr<ExecutableImpl> dropped;  // (destroyed outside the lock)
        std::lock_guard<std::mutex> lock(src->classes_mu);
        src->ahead.emplace_front(near, std::move(copy));
        if (src->ahead.size() > kMaxAhead) {
          dropped = std::move(src->ahead.back().second);
          src->ahead.pop_back();
        }
      } catch (const std::exception&) {  // the next size still; this one is compiled in turn
      }
  });
}

}  // namespace

void ExecutableImpl::prepare_sizes_near(const std::vector<TensorType>& types) const {
  if (!specialize || env_flag("TGRAPH_NO_SIZE_PREFETCH")) return;
  const Backend* backend = find_backend(device.kind);
  if (!backend || !backend->generates_kernels()) return;
  // Called after a run succeeded: nothing here may fail it (memory: nothing prepared).
  try {
    queue_sizes_near(specialize, types, backend);
  } catch (const std::exception&) {
  }
}

}  // namespace tg::detail
