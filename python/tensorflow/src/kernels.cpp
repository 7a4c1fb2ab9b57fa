// The kernel half of the TGRAPH PluggableDevice (kernel and op C API, TF_InitKernel).
//
// Now: registers the op a cluster becomes, TgraphCluster (no kernel yet, so nothing can run
// one). Variables need no kernel of ours: TensorFlow 2.19.1 registers VarHandleOp,
// ReadVariableOp, AssignVariableOp, AssignAdd/SubVariableOp (and Const, Identity, _Arg ...)
// for DEVICE_DEFAULT, which every PluggableDevice gets (docs/tensorflow-plugin.md).
// Next: the TgraphCluster kernel, and one kernel per supported op so that the placer puts those
// ops on TGRAPH and eager code runs them there.
#include "tensorflow/c/kernels.h"

#include <cstdio>

#include "plugin.h"
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"

TGRAPH_TF_EXPORT void TF_InitKernel() {
  TF_Status* s = TF_NewStatus();
  // One node per cluster: `body` holds the cluster's subgraph (a serialized GraphDef), the
  // inputs and outputs are plain tensors (variables are read before and assigned after).
  TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder("TgraphCluster");
  TF_OpDefinitionBuilderAddAttr(op, "Tin: list(type) >= 0");
  TF_OpDefinitionBuilderAddAttr(op, "Tout: list(type) >= 0");
  TF_OpDefinitionBuilderAddAttr(op, "body: string");
  TF_OpDefinitionBuilderAddInput(op, "args: Tin");
  TF_OpDefinitionBuilderAddOutput(op, "results: Tout");
  TF_OpDefinitionBuilderSetIsStateful(op, true);  // never folded or pruned as a constant
  TF_RegisterOpDefinition(op, s);
  if (TF_GetCode(s) != TF_OK)
    std::fprintf(stderr, "[tgraph-tf] registering TgraphCluster failed: %s\n", TF_Message(s));
  TF_DeleteStatus(s);
}
