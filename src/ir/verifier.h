#pragma once
// Structural and type checks of a whole graph (run before and after passes in debug builds).
#include <string>

#include "ir/graph_impl.h"

namespace tg::detail {

/// Checks every node: inputs defined before use and visible from its block, control deps
/// refer to existing nodes, regions belong to the node, and inference gives the stored types.
/// Returns "" when valid, else the first problem found.
std::string verify(const GraphImpl& g);
/// verify() that throws tg::Error("[verify] ...") on a problem.
void verify_or_throw(const GraphImpl& g, const std::string& after_pass = "");

}  // namespace tg::detail
