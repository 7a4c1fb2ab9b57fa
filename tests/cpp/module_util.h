#pragma once
// Pass tests: a Module over a copy of a graph with the given targets; a plan's stitched steps.
#include <memory>
#include <vector>

#include "passes/fusion.h"
#include "passes/module.h"
#include "tgraph/graph.h"

namespace passtest {

inline tg::detail::Module module_of(const tg::Graph& g, const std::vector<tg::Tensor>& targets,
                                    const std::vector<tg::Operation>& ops = {}) {
  tg::detail::Module m;
  m.graph = g.impl();
  for (const tg::Tensor& t : targets) m.targets.push_back(t.id());
  for (const tg::Operation& o : ops) m.target_ops.push_back(o.id());
  return m;
}

/// The stitched steps of one kind in a plan: steps_with(plan, &Step::reduce) or &Step::stitch.
template <class T>
std::vector<std::shared_ptr<const T>> steps_with(const tg::detail::FusionPlan& p,
                                                 std::shared_ptr<const T> tg::detail::Step::*kind) {
  std::vector<std::shared_ptr<const T>> r;
  for (const tg::detail::Step& s : p.steps)
    if (s.*kind) r.push_back(s.*kind);
  return r;
}

}  // namespace passtest
