#pragma once
// Readable text (SSA style, one op per line) and Graphviz dot forms of a graph.
#include <string>

#include "ir/graph_impl.h"

namespace tg::detail {

/// One op per line: "%3 = add(%1, %2) : [2,3] f32"; regions are indented blocks.
std::string print_text(const GraphImpl& g);
/// A Graphviz digraph: one node per op, data edges solid, control edges dashed.
std::string print_dot(const GraphImpl& g);

}  // namespace tg::detail
