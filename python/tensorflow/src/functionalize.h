// Conditionals back in one piece: TensorFlow lowers tf.cond to Switch / Merge before the
// plugin's optimizer sees the graph (docs/tensorflow-plugin.md, "Control flow arrives
// lowered"). This pass finds each lowered conditional whose branches are all on TGRAPH and
// convertible, and replaces it (its Switches' branch outputs, the branch nodes, the Merges) by
// one TgraphIf node holding both branches, which the kernels build as tgraph's if_else: only
// the branch the predicate picks runs, inside the cluster that computes the predicate.
#pragma once

#include <set>
#include <string>

#include "tensorflow/core/framework/graph.pb.h"

namespace tgraph_tf {

/// The op of a rebuilt conditional. Inputs: the predicate (a bool scalar), then the tensors
/// the branches read; attributes then_body / else_body (serialized GraphDefs whose nodes read
/// input k+1 as "_if_arg:k"), then_outs / else_outs (each output's tensor in each body), Tin,
/// Tout.
inline constexpr const char* kIfOp = "TgraphIf";

/// The name a branch body uses for the conditional's input k + 1.
std::string if_arg(size_t k);

/// Rebuilds every lowered conditional it can (innermost first); returns how many.
int functionalize_conds(tensorflow::GraphDef& g, const std::set<std::string>& preserve);

}  // namespace tgraph_tf
