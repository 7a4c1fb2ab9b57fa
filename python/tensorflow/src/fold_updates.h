// Variable updates into the clusters: the graph optimizer's pass before clustering (graph.cpp).
#pragma once

#include "tensorflow/core/framework/graph.pb.h"

namespace tgraph_tf {

/// Rewrites each AssignAddVariableOp / AssignSubVariableOp on TGRAPH whose delta a clusterable
/// node computes (f32 / f64) into ReadVariableOp -> AddV2 / Sub -> AssignVariableOp: the
/// arithmetic of the update then joins the cluster that computes the delta, so it runs in
/// tgraph (TensorFlow's default kernels for the two ops add with Eigen on the host: right for
/// the CPU device, wrong for device memory). The assign keeps the node's name and control
/// inputs, so what was ordered after the update still is; the read takes the same control
/// inputs, so it sees every write ordered before. Returns the number of updates rewritten.
int fold_variable_updates(tensorflow::GraphDef& g);

}  // namespace tgraph_tf
