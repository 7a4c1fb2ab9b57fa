#pragma once
// Turns the sized_ops whose sizes have become known into the ops they stand for.
#include "ir/graph_impl.h"

namespace tg::detail {

/// Each sized_op whose sizes are known (its data inputs' types static, its sizes computed from
/// constants and static shapes) becomes the plain op in place (same outputs), and the graph's
/// types are inferred again; repeated while one resolution makes another's sizes known. Run
/// where a compile has its feed types: in each size's copy of a dynamic executable every
/// sized_op resolves. Returns whether any did.
bool resolve_sized_ops(GraphImpl& g);

}  // namespace tg::detail
