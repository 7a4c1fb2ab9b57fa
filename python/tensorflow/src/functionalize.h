// Control flow back in one piece: TensorFlow lowers tf.cond to Switch / Merge (and
// tf.while_loop to frames) before the
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

/// The op of a rebuilt while loop (tgraph's while_loop). Inputs: each loop variable's initial
/// value, then the invariants the loop reads; attributes cond_body (its nodes read variable i
/// as "_loop_var:i", invariant k as "_if_arg:k") and cond_out (the predicate's tensor there),
/// body_body and body_outs (each variable's next value there), Tin, Tout (the variables'
/// types). Output i: variable i when the predicate is false.
inline constexpr const char* kWhileOp = "TgraphWhile";

/// The name a branch body uses for the conditional's input k + 1 (a loop's invariant k).
std::string if_arg(size_t k);

/// The name a loop's regions use for loop variable k.
std::string loop_var(size_t k);

/// Rebuilds every lowered conditional it can (innermost first); returns how many. First, a
/// differentiated conditional's optionals (the forward branch's values handed to the backward's
/// branch on the same side) are read as the values themselves, so no variant is left in a
/// branch. A conditional whose inputs depend on its own results is left lowered.
int functionalize_conds(tensorflow::GraphDef& g, const std::set<std::string>& preserve);

/// Rebuilds every lowered while loop (Enter / Merge / LoopCond / Switch / NextIteration / Exit
/// frame) whose condition and body are all on TGRAPH and convertible; returns how many.
int functionalize_loops(tensorflow::GraphDef& g, const std::set<std::string>& preserve);

}  // namespace tgraph_tf
