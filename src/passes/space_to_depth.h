#pragma once
#include "passes/module.h"

namespace tg::detail {

/// Strided convolutions of few input channels (an image's 3: ResNet's 7x7/2 stem) rewritten as
/// stride-1 convolutions over a space-to-depth view, for cuDNN. With 3 channels no tensor-core
/// kernel applies (16-bit NHWC needs multiples of 8): the stem ran at a fraction of the GPU's
/// rate, and padding the channels to 8 did not help (bench/RESULTS.md, session 14). Folding each
/// stride-s block of pixels into the channels makes the same sum a convolution of s*s*C
/// channels (16 for the stem, its channels padded to 4) with a ceil(k/s) kernel and stride 1:
///   x  [N,H,W,C]   -> pad (the conv's padding, the rows the blocks need, channels to Cp;
///                     rows the conv never reads cut off)
///                  -> [N,H'/s,s,W'/s,s,Cp] -> [N,H'/s,W'/s,s*s*Cp]
///   w  [kh,kw,C,K] -> zeros to [s*k'h, s*k'w, Cp, K] -> [k'h,s,k'w,s,Cp,K] -> [k'h,k'w,s*s*Cp,K]
/// The weight gradient is the same rewrite run backwards (the extra kernel taps and channels
/// sliced off). Exact: the added taps and channels multiply zeros. The data gradient keeps the
/// original convolution (an image's gradient is rarely wanted). NHWC only (the layout pass has
/// run), hwio or oihw weights, groups 1, no dilation, equal strides > 1, explicit or valid
/// padding, static shapes. Run for the CUDA backend (oneDNN has its own kernels for this).
struct SpaceToDepthConv : Pass {
  const char* name() const override { return "space_to_depth_conv"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
