// Host side of random_state / random / dropout on the device (kernels_random.cu). The state
// tensor stays on the device: the kernels read {seed, counter} there and write the advanced
// state, so a training step that threads the state through is captured and replayed whole.
#include <cmath>
#include <variant>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels_random.h"
#include "ops/infer.h"

namespace tg::detail {

static_assert(static_cast<int>(Distribution::normal) == static_cast<int>(RandomDist::normal) &&
              static_cast<int>(Distribution::truncated_normal) == static_cast<int>(RandomDist::truncated_normal));

bool cuda_random(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                 cudaStream_t stream, int device) {
  int sms = 0;
  TG_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  switch (n.kind) {
    case OpKind::RandomState:
      if (out.size() != 1) return false;
      TG_CUDA(launch_random_state(std::get<SeedDesc>(n.attr).seed, static_cast<int64_t*>(out[0].ptr), stream));
      return true;
    case OpKind::Random: {
      if (in.size() != 1 || out.size() != 2) return false;
      const auto& d = std::get<RandomDesc>(n.attr);
      const DType t = out[0].type.dtype;
      double a = d.a, b = d.b;
      if (d.distribution == Distribution::uniform && is_integer(t)) {  // integers in [ceil(a), ceil(b))
        a = std::ceil(d.a);
        b = std::ceil(d.b);
        if (b <= a)
          throw Error(op_tag(n.kind) + "no integer lies in [" + std::to_string(d.a) + ", " + std::to_string(d.b) + ")");
      }
      if (!is_float(t) && !is_integer(t)) return false;
      TG_CUDA(launch_random(static_cast<const int64_t*>(in[0].ptr), static_cast<RandomDist>(d.distribution), t, a, b,
                            out[0].ptr, static_cast<uint64_t>(out[0].type.shape.num_elements()),
                            static_cast<int64_t*>(out[1].ptr), sms, stream));
      return true;
    }
    case OpKind::Dropout: {
      if (in.size() != 2 || out.size() != 2 || !is_float(in[0].type.dtype)) return false;
      TG_CUDA(launch_dropout(static_cast<const int64_t*>(in[1].ptr), std::get<DropoutDesc>(n.attr).rate,
                             in[0].type.dtype, in[0].ptr, out[0].ptr,
                             static_cast<uint64_t>(in[0].type.shape.num_elements()), static_cast<int64_t*>(out[1].ptr),
                             sms, stream));
      return true;
    }
    default: return false;
  }
}

}  // namespace tg::detail
