#pragma once
#include "passes/module.h"

namespace tg::detail {

/// Folds an inference batch_norm into the convolution before it when the filters and the
/// statistics are constants and nothing else reads the convolution's result: the filters scaled
/// per output channel by gamma / sqrt(var + eps), the rest a per-channel bias add (which the
/// CPU convolution takes as its own bias, and CUDA fuses). What PyTorch users get from
/// `torch.fx` fusion or ONNX exporters by hand; here every inference graph gets it (issue 21).
struct FoldBatchNorm : Pass {
  const char* name() const override { return "fold_batch_norm"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
