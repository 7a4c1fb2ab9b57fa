#pragma once
// The NVRTC source generator of the stencil kernels (cuda_stencil.h), private to them: what one
// generated kernel is specialised on (Config), what planning hands the generator (Generated) and
// the Writer emitting the source part by part, its members defined where they belong:
//   stencil_codegen.cpp        the parts both kernels share (literals, the boundary function,
//                              StencilArgs, tg_boff, tg_block, tg_src with the prologue, weights);
//   stencil_tile_kernel.cpp    the shared-memory tile kernel and the choice of its tile;
//   stencil_direct_kernel.cpp  the register-blocked direct kernel and the choice of its shape;
//   cuda_stencil.cpp           planning (types, window, operands, weights) and launch.
// Sizes are run-time arguments; tile, window, strides, dilation, boundary and, when the weights
// are a constant, the weights themselves are compiled in (zero taps of a sum are skipped while
// the values read are finite, which keeps 0 * inf = NaN exact).
#include <cstdint>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_stencil.h"

namespace tg::detail::stencil_codegen {

constexpr int kThreads = 256;
constexpr int64_t kUnrolledTaps = 512;    // more taps: a loop over them
constexpr int64_t kRegisterWeights = 64;  // run-time weights kept in registers up to this many

// How a prologue / epilogue operand is addressed from the group's flat index.
enum class Access { flat, scalar, broadcast };

// What one generated kernel is specialised on.
struct Config {
  DType dt = DType::f32;
  Reduction red = Reduction::sum;
  Boundary bnd = Boundary::zero;
  double pad_value = 0;
  int64_t k[4]{}, s[4]{}, d[4]{}, T[4]{}, E[4]{};
  std::vector<double> weights;  // compiled in when not empty
  int weights_operand = -1;     // a.in index of the weights (run-time weights)
  // The direct kernel: V outputs along dim 3 times R along dim sd per thread, TX threads along
  // dim 3 and 256 / TX along dim bd; F the thread's input footprint; its rows are loaded as
  // nc 4-element chunks starting lo elements before the footprint (vin) or element by element.
  bool direct = false, vin = false, vout = false;
  int64_t V = 1, R = 1, TX = 32, sd = 2, bd = 2, F[4]{}, lo = 0, nc = 1;
  int64_t min_blocks = 0;  // __launch_bounds__ blocks per SM (caps registers); 0: none
};

/// The tile kernel's output tile (stencil_tile_kernel.cpp): sets c.T and c.E; false when no tile
/// fits in shared memory.
bool choose_tile(Config& c, const int64_t o[4], int64_t batch, int64_t elem);
/// The direct kernel's shape (stencil_direct_kernel.cpp): sets c.direct and the shape; false when
/// the window does not suit it and the tile kernel runs.
bool choose_direct(Config& c, const int64_t o[4], int64_t taps);

/// A literal of the compute type.
std::string lit(double v, const char* type);
/// The boundary function tg_res of boundary mode b.
std::string resolve_source(Boundary b);

struct Operand {
  int index;  // into a.in
  Access access;
};

/// Offset expression of an operand for flat group index `i`.
std::string operand_offset(const Operand& op, int side, const std::string& i);

struct Generated {
  const GraphImpl* g = nullptr;
  const StencilStitch* s = nullptr;
  Config c;
  int32_t pro_out = -1, epi_in = -1;  // prologue result; what the epilogue reads
  std::vector<std::pair<int32_t, Operand>> pro_ops, epi_ops;
  int source_operand = -1;  // a.in index of the source (no prologue)
  bool broadcast = false;
};

// Writes the kernel source for one configuration, part by part.
class Writer {
 public:
  explicit Writer(const Generated& gen);
  std::string source();

 private:
  std::string operand(int index) const { return "a.in[" + std::to_string(index) + "]"; }

  // The parts both kernels share (stencil_codegen.cpp).
  void helpers();
  std::string weight(int64_t t) const;
  std::unordered_map<int32_t, std::string> epilogue_values(const std::string& indent);

  // The tile kernel (stencil_tile_kernel.cpp).
  void load();
  std::string taps(bool skip) const;
  void reduction();
  void compute();
  void kernel();

  // The direct kernel, Config::direct (stencil_direct_kernel.cpp).
  std::string step(const std::string& acc, const std::string& best, const std::string& x, int64_t t) const;
  static std::string name2(char c, int64_t r, int64_t v);
  std::string acc(int64_t r, int64_t v) const;
  std::string best(int64_t r, int64_t v) const;
  void init_accs(bool declare);
  void src4();
  void direct_body(bool fast, bool skip);
  void direct_store();
  void direct();

  const Generated& gen_;
  const Config& c_;
  const GraphImpl& g_;
  const StencilStitch& st_;
  const char* C_;
  const bool arg_, padded_;
  const int64_t K_;
  const bool baked_, reg_weights_, unrolled_;
  bool skip_zeros_ = false;
  const int64_t R_, nch_, ru_, SE_[4];
  const std::string pad_;
  std::ostringstream os_;
};

}  // namespace tg::detail::stencil_codegen
