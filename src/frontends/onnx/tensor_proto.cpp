// TensorProto <-> TensorData: raw and typed storage, external data files.
#include <onnx/onnx-data_pb.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "core/read_file.h"
#include "frontends/onnx/importer.h"
#include "tgraph/onnx.h"

namespace tg::onnx_import {

namespace {
const char* onnx_type_name(int32_t t) {
  static const char* names[] = {"UNDEFINED",      "FLOAT",          "UINT8",      "INT8",          "UINT16",
                                "INT16",          "INT32",          "INT64",      "STRING",        "BOOL",
                                "FLOAT16",        "DOUBLE",         "UINT32",     "UINT64",        "COMPLEX64",
                                "COMPLEX128",     "BFLOAT16",       "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                "FLOAT8E5M2FNUZ", "UINT4",          "INT4",       "FLOAT4E2M1",    "FLOAT8E8M0",
                                "UINT2",          "INT2"};
  return t >= 0 && t <= 26 ? names[t] : "unknown";
}
[[noreturn]] void count_error_sz(const onnx::TensorProto& p, const Shape& shape, size_t got) {
  throw Error("[onnx] tensor '" + p.name() + "' holds " + std::to_string(got) + " values for shape " + shape.str());
}
}  // namespace

DType dtype_from_onnx(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::f32;
    case onnx::TensorProto::UINT8: return DType::u8;
    case onnx::TensorProto::INT8: return DType::i8;
    case onnx::TensorProto::INT16: return DType::i16;
    case onnx::TensorProto::INT32: return DType::i32;
    case onnx::TensorProto::INT64: return DType::i64;
    case onnx::TensorProto::BOOL: return DType::boolean;
    case onnx::TensorProto::FLOAT16: return DType::f16;
    case onnx::TensorProto::DOUBLE: return DType::f64;
    case onnx::TensorProto::BFLOAT16: return DType::bf16;
    // tgraph has no u16/u32/u64: they are held widened (exact, except u64 values >= 2^63).
    case onnx::TensorProto::UINT16: return DType::i32;
    case onnx::TensorProto::UINT32: return DType::i64;
    case onnx::TensorProto::UINT64: return DType::i64;
    // The narrow formats are held value-exact in a wider tgraph dtype (docs/onnx.md): 8- and
    // 4-bit floats in f32, 4- and 2-bit integers in i8 / u8. Casts to them round to the format.
    case kFloat8E4M3FN: case kFloat8E4M3FNUZ: case kFloat8E5M2: case kFloat8E5M2FNUZ: case kFloat4E2M1:
    case kFloat8E8M0:
      return DType::f32;
    case kInt4: case kInt2: return DType::i8;
    case kUint4: case kUint2: return DType::u8;
    default:
      throw Error(std::string("[onnx] element type ") + onnx_type_name(t) + " (" + std::to_string(t) +
                  ") is not supported by tgraph");
  }
}

namespace {
std::string read_external(const onnx::TensorProto& p, const std::string& base_dir, size_t nbytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = std::stoll(kv.value());
    if (kv.key() == "length") length = std::stoll(kv.value());
  }
  if (location.empty() || location.find("..") != std::string::npos)
    throw Error("[onnx] tensor '" + p.name() + "': bad external data location '" + location + "'");
  std::string path = base_dir + "/" + location;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("[onnx] tensor '" + p.name() + "': cannot open external data file " + path);
  f.seekg(offset);
  if (length >= 0 && static_cast<size_t>(length) != nbytes)
    throw Error("[onnx] tensor '" + p.name() + "': external data length " + std::to_string(length) + " does not match its " +
                std::to_string(nbytes) + " bytes");
  size_t n = nbytes;
  std::string buf(n, '\0');
  f.read(buf.data(), static_cast<std::streamsize>(n));
  if (static_cast<size_t>(f.gcount()) != n)
    throw Error("[onnx] tensor '" + p.name() + "': external data file " + path + " is too short");
  return buf;
}
}  // namespace

double decode_narrow(int32_t type, uint32_t b) {
  const double nan = std::nan("");
  auto fp = [&](int ebits, int mbits, int bias, bool fnuz, bool has_inf) {
    const uint32_t sign = b >> (ebits + mbits), e = (b >> mbits) & ((1u << ebits) - 1), m = b & ((1u << mbits) - 1);
    const uint32_t top = (1u << ebits) - 1;
    if (fnuz && sign && e == 0 && m == 0) return nan;  // FNUZ: the negative zero's code is NaN
    if (!fnuz && e == top) {
      if (has_inf) return m == 0 ? (sign ? -INFINITY : INFINITY) : nan;
      if (m == (1u << mbits) - 1 && type != kFloat4E2M1) return nan;  // E4M3FN: S.1111.111
    }
    const double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - mbits)
                            : std::ldexp(1.0 + static_cast<double>(m) / (1 << mbits), static_cast<int>(e) - bias);
    return sign ? -v : v;
  };
  switch (type) {
    case kFloat8E4M3FN: return fp(4, 3, 7, false, false);
    case kFloat8E4M3FNUZ: return fp(4, 3, 8, true, false);
    case kFloat8E5M2: return fp(5, 2, 15, false, true);
    case kFloat8E5M2FNUZ: return fp(5, 2, 16, true, false);
    case kFloat4E2M1: return fp(2, 1, 1, false, false);
    case kFloat8E8M0: return b == 255 ? nan : std::ldexp(1.0, static_cast<int>(b) - 127);
    case kInt4: return static_cast<double>(static_cast<int32_t>(b << 28) >> 28);
    case kInt2: return static_cast<double>(static_cast<int32_t>(b << 30) >> 30);
    default: return static_cast<double>(b);  // UINT4, UINT2
  }
}

int32_t narrow_type(int32_t t) { return t >= kFloat8E4M3FN && t <= kInt2 ? t : 0; }

int narrow_bits(int32_t type) {
  switch (type) {
    case kUint4: case kInt4: case kFloat4E2M1: return 4;
    case kUint2: case kInt2: return 2;
    case kFloat8E4M3FN: case kFloat8E4M3FNUZ: case kFloat8E5M2: case kFloat8E5M2FNUZ: case kFloat8E8M0: return 8;
    default: return 0;
  }
}

TensorData tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir) {
  DType dt = dtype_from_onnx(p.data_type());
  if (const int bits = narrow_bits(p.data_type())) {  // packed little-endian, first element lowest
    std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
    for (int64_t d : dims)
      if (d < 0) throw Error("[onnx] tensor '" + p.name() + "' has a negative dim");
    Shape shape(dims);
    const int64_t n = shape.num_elements();
    if (n > (int64_t{1} << 30)) throw Error("[onnx] tensor '" + p.name() + "' is too large");
    const size_t nbytes = static_cast<size_t>((n * bits + 7) / 8);
    std::string raw;
    if (p.data_location() == onnx::TensorProto::EXTERNAL) raw = read_external(p, base_dir, nbytes);
    else if (p.has_raw_data()) raw = p.raw_data();
    else
      for (int32_t v : p.int32_data()) raw.push_back(static_cast<char>(v & 0xff));
    if (raw.size() != nbytes) count_error_sz(p, shape, raw.size() * 8 / static_cast<size_t>(bits));
    TensorData t(shape, dt);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t byte = static_cast<unsigned char>(raw[static_cast<size_t>(i * bits / 8)]);
      const uint32_t code = (byte >> ((i * bits) % 8)) & ((1u << bits) - 1);
      t.set(i, decode_narrow(p.data_type(), code));
    }
    return t;
  }
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  double total = 1;
  for (int64_t d : dims) {
    if (d < 0) throw Error("[onnx] tensor '" + p.name() + "' has a negative dim");
    total *= static_cast<double>(d);
  }
  if (total > double(int64_t{1} << 34)) throw Error("[onnx] tensor '" + p.name() + "' is too large");
  Shape shape(dims);
  int64_t n = shape.num_elements();
  if (n > (int64_t{1} << 34)) throw Error("[onnx] tensor '" + p.name() + "' is too large");
  TensorData t(shape, dt);
  size_t esz = dtype_size(dt);
  int32_t ot = p.data_type();
  bool widened = ot == onnx::TensorProto::UINT16 || ot == onnx::TensorProto::UINT32 || ot == onnx::TensorProto::UINT64;
  if (widened) {
    size_t src = ot == onnx::TensorProto::UINT16 ? 2 : ot == onnx::TensorProto::UINT32 ? 4 : 8;
    std::string raw;
    if (p.data_location() == onnx::TensorProto::EXTERNAL) raw = read_external(p, base_dir, static_cast<size_t>(n) * src);
    else if (p.has_raw_data()) raw = p.raw_data();
    if (!raw.empty() || p.has_raw_data()) {
      if (raw.size() != static_cast<size_t>(n) * src) count_error_sz(p, shape, raw.size() / src);
      for (int64_t i = 0; i < n; ++i) {
        uint64_t v = 0;
        std::memcpy(&v, raw.data() + static_cast<size_t>(i) * src, src);
        if (dt == DType::i32) t.ptr<int32_t>()[i] = static_cast<int32_t>(v);
        else t.ptr<int64_t>()[i] = static_cast<int64_t>(v);
      }
      return t;
    }
    if (ot == onnx::TensorProto::UINT16) {
      if (p.int32_data_size() != n) count_error_sz(p, shape, static_cast<size_t>(p.int32_data_size()));
      for (int64_t i = 0; i < n; ++i) t.ptr<int32_t>()[i] = p.int32_data(static_cast<int>(i));
    } else {
      if (p.uint64_data_size() != n) count_error_sz(p, shape, static_cast<size_t>(p.uint64_data_size()));
      for (int64_t i = 0; i < n; ++i) t.ptr<int64_t>()[i] = static_cast<int64_t>(p.uint64_data(static_cast<int>(i)));
    }
    return t;
  }
  size_t nbytes = static_cast<size_t>(n) * esz;
  auto count_error = [&](size_t got) {
    throw Error("[onnx] tensor '" + p.name() + "' holds " + std::to_string(got) + " values for shape " +
                shape.str());
  };
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string raw = read_external(p, base_dir, nbytes);
    if (raw.size() != nbytes) count_error(raw.size() / esz);
    std::memcpy(t.data(), raw.data(), nbytes);
    return t;
  }
  if (p.has_raw_data()) {
    if (p.raw_data().size() != nbytes) count_error(p.raw_data().size() / esz);
    if (nbytes) std::memcpy(t.data(), p.raw_data().data(), nbytes);
    return t;
  }
  auto fill = [&](const auto& field, auto store) {
    if (static_cast<int64_t>(field.size()) != n) count_error(static_cast<size_t>(field.size()));
    for (int64_t i = 0; i < n; ++i) store(i, field.Get(static_cast<int>(i)));
  };
  switch (dt) {
    case DType::f32: fill(p.float_data(), [&](int64_t i, float v) { t.ptr<float>()[i] = v; }); break;
    case DType::f64: fill(p.double_data(), [&](int64_t i, double v) { t.ptr<double>()[i] = v; }); break;
    case DType::i64: fill(p.int64_data(), [&](int64_t i, int64_t v) { t.ptr<int64_t>()[i] = v; }); break;
    case DType::f16:
    case DType::bf16:
      fill(p.int32_data(), [&](int64_t i, int32_t v) { t.ptr<uint16_t>()[i] = static_cast<uint16_t>(v); });
      break;
    default: fill(p.int32_data(), [&](int64_t i, int32_t v) { t.set(i, v); }); break;
  }
  return t;
}

}  // namespace tg::onnx_import

namespace tg {

TensorData read_onnx_tensor(const std::string& path, std::string* name) {
  const std::string bytes = detail::read_file(path, "onnx");
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes)) throw Error("[onnx] " + path + " is not a TensorProto");
  if (name) *name = p.name();
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  return onnx_import::tensor_from_proto(p, dir);
}

namespace {
// SequenceProto / OptionalProto elem_type codes.
constexpr int32_t kElemTensor = 1, kElemSequence = 3, kElemOptional = 5;

OnnxValueForm sequence_form(const onnx::SequenceProto& s, const std::string& dir,
                            std::vector<TensorData>& out);

OnnxValueForm optional_form(const onnx::OptionalProto& o, const std::string& dir,
                            std::vector<TensorData>& out) {
  OnnxValueForm f;
  f.kind = OnnxValueForm::Kind::optional;
  if (o.has_tensor_value()) {
    out.push_back(onnx_import::tensor_from_proto(o.tensor_value(), dir));
    f.elements.emplace_back();
  } else if (o.has_sequence_value()) {
    f.elements.push_back(sequence_form(o.sequence_value(), dir, out));
  } else if (o.has_optional_value()) {
    f.elements.push_back(optional_form(o.optional_value(), dir, out));
  } else if (o.elem_type() != kElemTensor && o.elem_type() != kElemSequence &&
             o.elem_type() != kElemOptional && o.elem_type() != 0) {
    throw Error("[onnx] optionals of element type " + std::to_string(o.elem_type()) + " are not supported");
  }
  return f;
}

OnnxValueForm sequence_form(const onnx::SequenceProto& s, const std::string& dir,
                            std::vector<TensorData>& out) {
  OnnxValueForm f;
  f.kind = OnnxValueForm::Kind::sequence;
  if (s.sparse_tensor_values_size() || s.map_values_size())
    throw Error("[onnx] sequences of sparse tensors or maps are not supported");
  for (const auto& t : s.tensor_values()) {
    out.push_back(onnx_import::tensor_from_proto(t, dir));
    f.elements.emplace_back();
  }
  for (const auto& e : s.sequence_values()) f.elements.push_back(sequence_form(e, dir, out));
  for (const auto& e : s.optional_values()) f.elements.push_back(optional_form(e, dir, out));
  return f;
}
}  // namespace

OnnxValueForm read_onnx_value(const std::string& path, OnnxValueForm::Kind kind,
                              std::vector<TensorData>& tensors) {
  if (kind == OnnxValueForm::Kind::tensor) {
    tensors.push_back(read_onnx_tensor(path));
    return {};
  }
  const std::string bytes = detail::read_file(path, "onnx");
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (kind == OnnxValueForm::Kind::sequence) {
    onnx::SequenceProto s;
    if (!s.ParseFromString(bytes)) throw Error("[onnx] " + path + " is not a SequenceProto");
    return sequence_form(s, dir, tensors);
  }
  onnx::OptionalProto o;
  if (!o.ParseFromString(bytes)) throw Error("[onnx] " + path + " is not an OptionalProto");
  return optional_form(o, dir, tensors);
}

}  // namespace tg
