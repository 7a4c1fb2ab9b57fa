#pragma once
// Input generators of the op sweep (op_sweep_test.cpp). Each makes one input of a case from
// the case's dtype and a seed. Values stay inside the op's domain (positive for log, [-1, 1]
// for asin, indices in range) and, where an op's result would depend on how ties are broken
// or on rounding of near-equal values, are distinct (Perm) or exact small integers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "tgraph/tgraph.h"

namespace op_sweep {

using tg::DType;
using tg::Shape;
using tg::TensorData;

/// One input of a case: made for the case's dtype and a seed.
using Gen = std::function<TensorData(DType case_dtype, uint64_t seed)>;
using Rng = std::mt19937_64;

inline double uni(Rng& r, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(r); }
inline int64_t irange(Rng& r, int64_t lo, int64_t hi_inclusive) {
  return std::uniform_int_distribution<int64_t>(lo, hi_inclusive)(r);
}

/// Values fn(rng, i) stored in dtype t (converted, saturated, as TensorData::set does).
template <class F>
TensorData make(const Shape& s, DType t, uint64_t seed, F fn) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 12345);
  std::vector<double> v(static_cast<size_t>(s.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = fn(rng, static_cast<int64_t>(i));
  return TensorData::from_vector(s, t, v);
}

/// Uniform in [lo, hi): floats as drawn; integers the floor (u8 shifted to start at 0);
/// bool true or false with equal odds.
inline Gen U(Shape s, double lo, double hi) {
  return [=](DType t, uint64_t seed) {
    if (t == DType::boolean) return make(s, t, seed, [](Rng& r, int64_t) { return double(irange(r, 0, 1)); });
    const bool shift = t == DType::u8 && lo < 0;
    return make(s, t, seed, [&](Rng& r, int64_t) {
      double v = shift ? uni(r, 0, hi - lo) : uni(r, lo, hi);
      return tg::is_float(t) ? v : std::floor(v);
    });
  };
}

/// Standard normal values (floats only).
inline Gen Randn(Shape s) {
  return [=](DType t, uint64_t seed) { return TensorData::randn(s, t, seed); };
}

/// The same generator with a fixed dtype (the case's dtype ignored).
inline Gen As(DType fixed, Gen g) {
  return [=](DType, uint64_t seed) { return g(fixed, seed); };
}

/// One generator for float case dtypes, another for integer and bool ones.
inline Gen Either(Gen floats, Gen others) {
  return [=](DType t, uint64_t seed) { return tg::is_float(t) ? floats(t, seed) : others(t, seed); };
}

/// Every value the dtype holds (floats: [-4, 4)): integer ops then wrap and saturate.
inline Gen FullRange(Shape s) {
  return [=](DType t, uint64_t seed) {
    switch (t) {
      case DType::i8: return make(s, t, seed, [](Rng& r, int64_t) { return double(irange(r, -128, 127)); });
      case DType::u8: return make(s, t, seed, [](Rng& r, int64_t) { return double(irange(r, 0, 255)); });
      case DType::i16:
        return make(s, t, seed, [](Rng& r, int64_t) { return double(irange(r, -32768, 32767)); });
      case DType::i32:
        return make(s, t, seed, [](Rng& r, int64_t) { return double(irange(r, INT32_MIN, INT32_MAX)); });
      case DType::i64: {  // written directly: a double does not hold every i64
        TensorData d(s, t);
        Rng r(seed * 0x9E3779B97F4A7C15ull + 777);
        for (int64_t i = 0; i < d.num_elements(); ++i) d.ptr<int64_t>()[i] = static_cast<int64_t>(r());
        return d;
      }
      default: return U(s, -4, 4)(t, seed);
    }
  };
}

/// Distinct values (no ties anywhere in the tensor): a permutation of 0..N-1, centred on 0
/// for signed types and floats, times `scale`. Exact in bf16 while N <= 512 (scale 1).
inline Gen Perm(Shape s, double scale = 1.0) {
  return [=](DType t, uint64_t seed) {
    const int64_t n = s.num_elements();
    std::vector<int64_t> p(static_cast<size_t>(n));
    std::iota(p.begin(), p.end(), 0);
    Rng rng(seed + 99);
    std::shuffle(p.begin(), p.end(), rng);
    const double centre = t == DType::u8 ? 0 : static_cast<double>(n / 2);
    return make(s, t, seed, [&](Rng&, int64_t i) {
      return (static_cast<double>(p[static_cast<size_t>(i)]) - centre) * scale;
    });
  };
}

/// Integers in [-k, k] (u8: [0, 2k]; bool: 0 / 1), exact in every dtype: many ties.
inline Gen SmallInts(Shape s, int64_t k) {
  return [=](DType t, uint64_t seed) {
    if (t == DType::boolean) return make(s, t, seed, [](Rng& r, int64_t) { return double(irange(r, 0, 1)); });
    const int64_t lo = t == DType::u8 ? 0 : -k, hi = t == DType::u8 ? 2 * k : k;
    return make(s, t, seed, [&](Rng& r, int64_t) { return double(irange(r, lo, hi)); });
  };
}

/// Multiples of 0.5 in [-8, 8]: the ties of round / rint.
inline Gen Halves(Shape s) {
  return [=](DType t, uint64_t seed) {
    return make(s, t, seed, [](Rng& r, int64_t) { return 0.5 * static_cast<double>(irange(r, -16, 16)); });
  };
}

/// Uniform in [lo, hi) with NaN, +inf and -inf sprinkled in (floats; integers: as U).
inline Gen Specials(Shape s, double lo = -3, double hi = 3) {
  return [=](DType t, uint64_t seed) {
    if (!tg::is_float(t)) return U(s, lo, hi)(t, seed);
    const double inf = std::numeric_limits<double>::infinity();
    return make(s, t, seed, [&](Rng& r, int64_t i) {
      double v = uni(r, lo, hi);
      if (i % 7 == 3) return std::nan("");
      if (i % 11 == 5) return inf;
      if (i % 13 == 6) return -inf;
      return v;
    });
  };
}

/// Divisors: floats +-[0.5, 2) (and every fifth 0 when float_zeros); integers in [-5, 5],
/// zero included when int_zeros (the ops define x / 0 for integers).
inline Gen Divisor(Shape s, bool int_zeros = true, bool float_zeros = false) {
  return [=](DType t, uint64_t seed) {
    if (tg::is_float(t))
      return make(s, t, seed, [&](Rng& r, int64_t i) {
        if (float_zeros && i % 5 == 2) return 0.0;
        return (irange(r, 0, 1) ? 1.0 : -1.0) * uni(r, 0.5, 2);
      });
    return make(s, t, seed, [&](Rng& r, int64_t) {
      int64_t v = t == DType::u8 ? irange(r, int_zeros ? 0 : 1, 7) : irange(r, -5, 5);
      if (v == 0 && !int_zeros) v = 3;
      return double(v);
    });
  };
}

/// About half the elements zero, the rest non-zero (non_zero_indices).
inline Gen Sparse(Shape s) {
  return [=](DType t, uint64_t seed) {
    return make(s, t, seed, [&](Rng& r, int64_t) {
      if (irange(r, 0, 1)) return 0.0;
      if (t == DType::boolean || t == DType::u8) return double(irange(r, 1, 5));
      return (irange(r, 0, 1) ? 1.0 : -1.0) * (tg::is_float(t) ? uni(r, 0.25, 3) : double(irange(r, 1, 5)));
    });
  };
}

/// Bools, true with probability p (reduce_all / reduce_any see both outcomes).
inline Gen Bools(Shape s, double p) {
  return [=](DType, uint64_t seed) {
    return make(s, DType::boolean, seed, [&](Rng& r, int64_t) { return uni(r, 0, 1) < p ? 1.0 : 0.0; });
  };
}

/// Integer indices in [lo, hi) of dtype it.
inline Gen Idx(Shape s, int64_t lo, int64_t hi, DType it = DType::i32) {
  return [=](DType, uint64_t seed) {
    return make(s, it, seed, [&](Rng& r, int64_t) { return double(irange(r, lo, hi - 1)); });
  };
}

/// Distinct indices in [0, n) (the first N of a shuffle): scatter-set without duplicates.
inline Gen UniqueIdx(Shape s, int64_t n, DType it = DType::i32) {
  return [=](DType, uint64_t seed) {
    std::vector<int64_t> p(static_cast<size_t>(n));
    std::iota(p.begin(), p.end(), 0);
    Rng rng(seed + 5);
    std::shuffle(p.begin(), p.end(), rng);
    return make(s, it, seed, [&](Rng&, int64_t i) { return double(p[static_cast<size_t>(i)]); });
  };
}

/// [rows, cols] indices, each row distinct values in [0, n) (scatter_along_axis on axis 1).
inline Gen UniquePerRow(int64_t rows, int64_t cols, int64_t n, DType it = DType::i32) {
  return [=](DType, uint64_t seed) {
    Rng rng(seed + 17);
    std::vector<double> v;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int64_t> p(static_cast<size_t>(n));
      std::iota(p.begin(), p.end(), 0);
      std::shuffle(p.begin(), p.end(), rng);
      for (int64_t c = 0; c < cols; ++c) v.push_back(double(p[static_cast<size_t>(c)]));
    }
    return TensorData::from_vector(Shape{rows, cols}, it, v);
  };
}

/// [m, K] distinct multi-indices into dims (K = dims.size()): scatter_nd without duplicates.
inline Gen UniqueRows(int64_t m, std::vector<int64_t> dims, DType it = DType::i32) {
  return [=](DType, uint64_t seed) {
    int64_t total = 1;
    for (int64_t d : dims) total *= d;
    std::vector<int64_t> p(static_cast<size_t>(total));
    std::iota(p.begin(), p.end(), 0);
    Rng rng(seed + 23);
    std::shuffle(p.begin(), p.end(), rng);
    std::vector<double> v;
    for (int64_t i = 0; i < m; ++i) {
      int64_t f = p[static_cast<size_t>(i)];
      std::vector<double> idx(dims.size());
      for (size_t k = dims.size(); k-- > 0;) {
        idx[k] = static_cast<double>(f % dims[k]);
        f /= dims[k];
      }
      v.insert(v.end(), idx.begin(), idx.end());
    }
    return TensorData::from_vector(Shape{m, static_cast<int64_t>(dims.size())}, it, v);
  };
}

/// Shift amounts for a dtype of width w bits: [-2, w + 2) (u8: [0, w + 2); bool: 0 / 1), so
/// out-of-range amounts are exercised too.
inline Gen ShiftAmount(Shape s) {
  return [=](DType t, uint64_t seed) {
    const int64_t w = t == DType::boolean ? 1 : static_cast<int64_t>(tg::dtype_size(t) * 8);
    const int64_t lo = t == DType::boolean || t == DType::u8 ? 0 : -2, hi = t == DType::boolean ? 1 : w + 1;
    return make(s, t, seed, [&](Rng& r, int64_t) { return double(irange(r, lo, hi)); });
  };
}

/// A fixed scalar of a fixed dtype (loop trip counts, if_else predicates).
inline Gen Scalar(double v, DType t) {
  return [=](DType, uint64_t) { return TensorData::scalar(v, t); };
}

}  // namespace op_sweep
