#!/usr/bin/env bash
# Which of the installed TensorFlow's libraries export the C API symbols the TGRAPH plugin
# uses or might use (docs/tensorflow-plugin.md, "Facts checked"). Re-run before any version bump.
#   python/tensorflow/check_wheel.sh [python]
set -euo pipefail
PY=${1:-python3}
TF=$("$PY" -c "import importlib.util as u, os; print(os.path.dirname(u.find_spec('tensorflow').origin))")
echo "tensorflow at $TF ($("$PY" -c "import importlib.metadata as m; print(m.version('tensorflow-cpu'))" 2>/dev/null || echo '?'))"
for h in c/experimental/stream_executor/stream_executor.h c/experimental/grappler/grappler.h \
         c/kernels.h c/kernels_experimental.h c/ops.h core/framework/graph.pb.h; do
  [ -f "$TF/include/tensorflow/$h" ] && echo "header  ok       $h" || echo "header  MISSING  $h"
done
libs=("$TF/libtensorflow_framework.so.2" "$TF/libtensorflow_cc.so.2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for l in "${libs[@]}"; do nm -D --defined-only "$l" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/$(basename "$l")"; done
for s in TF_NewKernelBuilder TF_RegisterKernelBuilder TF_KernelBuilder_TypeConstraint \
         TF_KernelBuilder_HostMemory TF_GetInput TF_SetOutput TF_AllocateOutput TF_NewTensor \
         TF_GetStream TF_OpKernelConstruction_GetNodeDef TF_NewOpDefinitionBuilder \
         TF_RegisterOpDefinition TF_GetNodesToPreserveList TF_GetFetchNodesListSize \
         TF_NewGraphProperties TF_InferStatically TF_GetOutputPropertiesList \
         TF_AssignVariable TF_AssignUpdateVariable TF_GetInputTensorFromVariable \
         TF_MaybeLockVariableInputMutexesInOrder; do
  where=""
  for l in "${libs[@]}"; do grep -qx "$s" "$tmp/$(basename "$l")" && where="$where $(basename "$l")"; done
  printf '%-42s %s\n' "$s" "${where:- NOT EXPORTED}"
done
