#include "tgraph/dtype.h"

#include "tgraph/error.h"

namespace tg {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: case DType::i16: return 2;
    case DType::i8: case DType::u8: case DType::boolean: case DType::f8e4m3: case DType::f8e5m2: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::i8: return "i8";
    case DType::i16: return "i16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == dtype_name(static_cast<DType>(i))) return static_cast<DType>(i);
  throw Error("[dtype] unknown element type '" + name + "'");
}

bool is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}
bool is_float8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }
bool is_integer(DType t) {
  return t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64 || t == DType::u8;
}
bool is_signed_integer(DType t) { return is_integer(t) && t != DType::u8; }

namespace {
// Rank in the promotion lattice: bool < ints (by width) < f8 < f16/bf16 < f32 < f64.
int rank_of(DType t) {
  switch (t) {
    case DType::boolean: return 0;
    case DType::u8: return 1;
    case DType::i8: return 2;
    case DType::i16: return 3;
    case DType::i32: return 4;
    case DType::i64: return 5;
    case DType::f8e5m2: return 6;
    case DType::f8e4m3: return 7;
    case DType::f16: return 8;
    case DType::bf16: return 9;
    case DType::f32: return 10;
    case DType::f64: return 11;
  }
  return 0;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // f16 with bf16 has no exact common 16-bit type: use f32 (as PyTorch does).
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  // The two 8-bit floats have no common 8-bit type: f16 holds both exactly.
  if (is_float8(a) && is_float8(b)) return DType::f16;
  // u8 with i8 widens to i16.
  if ((a == DType::u8 && b == DType::i8) || (a == DType::i8 && b == DType::u8)) return DType::i16;
  return rank_of(a) >= rank_of(b) ? a : b;
}

}  // namespace tg
