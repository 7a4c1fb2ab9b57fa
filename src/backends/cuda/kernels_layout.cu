// launch_permute (kernels_layout.h). Dims that stay neighbours in the same order are merged
// first; a permutation that then moves the input's innermost dim (a 2-D transpose, batched or
// not: cuDNN's weight layouts from HWIO or OIHW and back, NCHW <-> NHWC; or any other, such
// as OIHW -> HWIO) runs as 32 x 32 tiles through shared memory (256 x A where the input's
// innermost dim A is short), reads and writes both coalesced. One that keeps it innermost runs a thread per output element gathering its input
// (runs of the innermost dim on both sides): the weights' permutes of a ResNet-50 step had
// taken 2.2 ms that way, 158 launches at 1.4 TB/s for 3 GB.
#include "backends/cuda/kernels_layout.h"

namespace tg::detail {
namespace {

struct PermuteArgs {
  int rank;
  long long out_dims[kMaxPermuteRank];
  long long in_strides_for_out[kMaxPermuteRank];  // in stride of the dim that out dim i reads
};

template <class T>
__global__ void permute_kernel(const T* __restrict__ in, T* __restrict__ out, PermuteArgs a, long long n) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) {
    long long rest = i, src = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      long long c = rest % a.out_dims[d];
      rest /= a.out_dims[d];
      src += c * a.in_strides_for_out[d];
    }
    out[i] = in[src];
  }
}

constexpr int kTile = 32;
constexpr int kMaxRest = kMaxPermuteRank - 2;

// The dims of a tiled permute: `a` is the input's innermost (stride 1 there, out_a in the
// output), `b` the output's innermost (stride 1 there, in_b in the input), and up to four others
// walked per block, with their strides on both sides.
struct TileArgs {
  long long A, B, in_b, out_a, rest;
  int nrest;
  long long rest_dims[kMaxRest], rest_in[kMaxRest], rest_out[kMaxRest];
};

// Index x of the other dims (neither a nor b): its offsets in the input and the output.
__device__ __forceinline__ void rest_offsets(const TileArgs& t, long long x, long long& rin, long long& rout) {
  for (int k = t.nrest - 1; k >= 0; --k) {
    const long long c = x % t.rest_dims[k];
    x /= t.rest_dims[k];
    rin += c * t.rest_in[k];
    rout += c * t.rest_out[k];
  }
}

// A block moves one 32 x 32 tile of (b, a) for one index of the other dims (blockIdx.z, in
// slices of 65535 along y and z), 32 x 8 threads, four rows each: reads run along a, writes
// along b, both coalesced.
template <class T>
__global__ void __launch_bounds__(256) transpose_kernel(const T* __restrict__ in, T* __restrict__ out, const TileArgs t) {
  __shared__ T tile[kTile][kTile + 1];
  const long long a0 = static_cast<long long>(blockIdx.x) * kTile;
  for (long long x = blockIdx.z; x < t.rest; x += gridDim.z) {
    long long rin = 0, rout = 0;
    rest_offsets(t, x, rin, rout);
    for (long long b0 = static_cast<long long>(blockIdx.y) * kTile; b0 < t.B; b0 += static_cast<long long>(gridDim.y) * kTile) {
      for (int r = threadIdx.y; r < kTile; r += 8) {
        const long long b = b0 + r, a = a0 + threadIdx.x;
        if (a < t.A && b < t.B) tile[r][threadIdx.x] = in[rin + b * t.in_b + a];
      }
      __syncthreads();
      for (int r = threadIdx.y; r < kTile; r += 8) {
        const long long a = a0 + r, b = b0 + threadIdx.x;
        if (a < t.A && b < t.B) out[rout + a * t.out_a + b] = tile[threadIdx.x][r];
      }
      __syncthreads();
    }
  }
}

// The input's innermost dim short (A <= kNarrowA: the 3 x 3 window of OIHW weights going to
// OHWI): a 32 x 32 tile would hold 32 x A elements, most of it idle (eight thousand blocks of
// 288 elements for a 512 x 512 x 3 x 3 weight, 9 us a launch). A block instead moves kNarrowB
// rows of b by A: read along the input (runs of A), written along b, through shared memory.
constexpr int kNarrowA = 16;
constexpr int kNarrowB = 256;

template <class T>
__global__ void __launch_bounds__(256) narrow_transpose_kernel(const T* __restrict__ in, T* __restrict__ out,
                                                               const TileArgs t) {
  __shared__ T tile[kNarrowB * kNarrowA];
  const long long b0 = static_cast<long long>(blockIdx.x) * kNarrowB;
  const int A = static_cast<int>(t.A);
  const int rows = static_cast<int>(t.B - b0 < kNarrowB ? t.B - b0 : kNarrowB);
  for (long long x = blockIdx.z; x < t.rest; x += gridDim.z) {
    long long rin = 0, rout = 0;
    rest_offsets(t, x, rin, rout);
    for (int i = threadIdx.x; i < rows * A; i += 256) {
      const int r = i / A, a = i - r * A;
      tile[r * A + a] = in[rin + (b0 + r) * t.in_b + a];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < rows * A; i += 256) {
      const int a = i / rows, r = i - a * rows;
      out[rout + a * t.out_a + b0 + r] = tile[r * A + a];
    }
    __syncthreads();
  }
}

template <class T>
cudaError_t launch(const void* in, void* out, const PermuteArgs& a, long long n, cudaStream_t stream) {
  long long blocks = (n + 255) / 256;
  permute_kernel<T><<<static_cast<unsigned>(blocks < 8192 ? blocks : 8192), 256, 0, stream>>>(
      static_cast<const T*>(in), static_cast<T*>(out), a, n);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_transpose(const void* in, void* out, const TileArgs& t, cudaStream_t stream) {
  auto clip = [](long long v) { return static_cast<unsigned>(v < 65535 ? v : 65535); };
  if (t.A <= kNarrowA) {
    const long long bx = (t.B + kNarrowB - 1) / kNarrowB;
    if (bx > 2147483647LL) return cudaErrorInvalidValue;
    narrow_transpose_kernel<T><<<dim3(static_cast<unsigned>(bx), 1, clip(t.rest)), 256, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), t);
    return cudaGetLastError();
  }
  const long long bx = (t.A + kTile - 1) / kTile, by = (t.B + kTile - 1) / kTile;
  if (bx > 2147483647LL) return cudaErrorInvalidValue;
  transpose_kernel<T><<<dim3(static_cast<unsigned>(bx), clip(by), clip(t.rest)), dim3(kTile, 8), 0, stream>>>(
      static_cast<const T*>(in), static_cast<T*>(out), t);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_permute(const void* in, void* out, int rank, const long long* in_dims, const int* perm,
                           int elem_size, cudaStream_t stream) {
  if (rank < 1 || rank > kMaxPermuteRank) return cudaErrorInvalidValue;
  PermuteArgs a{};
  a.rank = rank;
  long long in_strides[kMaxPermuteRank];
  long long n = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (in_dims[d] < 0) return cudaErrorInvalidValue;
    in_strides[d] = n;
    n *= in_dims[d];
  }
  bool used[kMaxPermuteRank] = {};
  for (int d = 0; d < rank; ++d) {
    int p = perm[d];
    if (p < 0 || p >= rank || used[p]) return cudaErrorInvalidValue;
    used[p] = true;
    a.out_dims[d] = in_dims[p];
    a.in_strides_for_out[d] = in_strides[p];
  }
  if (n == 0) return cudaSuccess;
  // Merge runs of output dims that read consecutive input dims (size-1 dims dropped): groups
  // of input dims, in output order, each with its merged extent and its innermost input dim.
  int groups[kMaxPermuteRank], inner[kMaxPermuteRank];
  long long extent[kMaxPermuteRank];
  int ng = 0, last = -2;
  for (int d = 0; d < rank; ++d) {
    const int p = perm[d];
    if (in_dims[p] == 1) continue;
    if (ng > 0 && p == last + 1) {
      extent[ng - 1] *= in_dims[p];
      inner[ng - 1] = p;
    } else {
      groups[ng] = p;
      inner[ng] = p;
      extent[ng++] = in_dims[p];
    }
    last = p;
  }
  // Every element stays where it is (only dims of size 1 move): a copy.
  if (ng <= 1) return cudaMemcpyAsync(out, in, static_cast<size_t>(n) * static_cast<size_t>(elem_size), cudaMemcpyDeviceToDevice, stream);
  // The input's innermost group moves: tiles through shared memory (a batched 2-D transpose,
  // or any permutation that moves it). Otherwise each output run is an input run: the gather.
  int ia = 0;
  for (int k = 1; k < ng; ++k)
    if (groups[k] > groups[ia]) ia = k;
  if (ng >= 2 && ia != ng - 1) {
    TileArgs t{};
    long long out_stride[kMaxPermuteRank];
    long long acc = 1;
    for (int k = ng - 1; k >= 0; --k) {
      out_stride[k] = acc;
      acc *= extent[k];
    }
    t.A = extent[ia];
    t.out_a = out_stride[ia];
    t.B = extent[ng - 1];
    t.in_b = in_strides[inner[ng - 1]];
    t.rest = 1;
    for (int k = 0; k < ng - 1; ++k) {
      if (k == ia) continue;
      t.rest_dims[t.nrest] = extent[k];
      t.rest_in[t.nrest] = in_strides[inner[k]];
      t.rest_out[t.nrest++] = out_stride[k];
      t.rest *= extent[k];
    }
    switch (elem_size) {
      case 1: return launch_transpose<unsigned char>(in, out, t, stream);
      case 2: return launch_transpose<unsigned short>(in, out, t, stream);
      case 4: return launch_transpose<unsigned int>(in, out, t, stream);
      case 8: return launch_transpose<unsigned long long>(in, out, t, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (elem_size) {
    case 1: return launch<unsigned char>(in, out, a, n, stream);
    case 2: return launch<unsigned short>(in, out, a, n, stream);
    case 4: return launch<unsigned int>(in, out, a, n, stream);
    case 8: return launch<unsigned long long>(in, out, a, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tg::detail
