#pragma once
// Element types of tensors.
#include <cstddef>
#include <cstdint>
#include <string>

namespace tg {

/// Element type of a tensor.
/// f8e4m3 and f8e5m2 are the OCP 8-bit floats (E4M3FN: no infinity, max 448; E5M2: IEEE-like,
/// max 57344) that FP8 tensor cores take. They are storage types: cast, data movement and
/// scaled_matmul take them; arithmetic refuses them (cast to a wider float first).
enum class DType : uint8_t { f32, f16, bf16, f64, i8, i16, i32, i64, u8, boolean, f8e4m3, f8e5m2 };
/// How many dtypes there are (the enum's values are 0 .. kNumDTypes - 1, stable in files).
inline constexpr int kNumDTypes = 12;

inline constexpr DType f32 = DType::f32;
inline constexpr DType f16 = DType::f16;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType f64 = DType::f64;
inline constexpr DType i8 = DType::i8;
inline constexpr DType i16 = DType::i16;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType u8 = DType::u8;
inline constexpr DType boolean = DType::boolean;
inline constexpr DType f8e4m3 = DType::f8e4m3;
inline constexpr DType f8e5m2 = DType::f8e5m2;

/// Bytes per element.
size_t dtype_size(DType t);
/// Short lower-case name ("f32", "bool").
const char* dtype_name(DType t);
/// Parses a name written by dtype_name; throws tg::Error on an unknown name.
DType dtype_from_name(const std::string& name);
/// True for f16, bf16, f32, f64 (the types arithmetic takes; not the 8-bit floats).
bool is_float(DType t);
/// True for the 8-bit floats f8e4m3 and f8e5m2.
bool is_float8(DType t);
/// True for signed and unsigned integer types (not bool).
bool is_integer(DType t);
/// True for the signed integer types.
bool is_signed_integer(DType t);

/// The type both operands convert to in a binary op (numpy-like, floats win, wider wins).
DType promote_types(DType a, DType b);

}  // namespace tg
