// NumPy .npy reader and writer (the header is a Python dict literal; we parse the three keys).
#include "npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "tgraph/error.h"

namespace tg::tools {

namespace {

const char* descr_of(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::f64: return "<f8";
    case DType::i8: return "|i1";
    case DType::i16: return "<i2";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::boolean: return "|b1";
    case DType::bf16: case DType::f8e4m3: case DType::f8e5m2: break;
  }
  throw Error("[npy] dtype " + std::string(dtype_name(t)) + " has no NumPy equivalent");
}

DType dtype_of(const std::string& d, const std::string& path) {
  static const std::pair<const char*, DType> table[] = {
      {"f4", DType::f32}, {"f2", DType::f16}, {"f8", DType::f64}, {"i1", DType::i8},  {"i2", DType::i16},
      {"i4", DType::i32}, {"i8", DType::i64}, {"u1", DType::u8},  {"b1", DType::boolean}};
  if (d.size() == 3 && d[0] != '>')
    for (const auto& [n, t] : table)
      if (d.substr(1) == n) return t;
  throw Error("[npy] " + path + ": unsupported dtype '" + d + "'");
}

std::string value_of(const std::string& header, const std::string& key, const std::string& path) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) throw Error("[npy] " + path + ": header lacks '" + key + "'");
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) throw Error("[npy] " + path + ": bad header");
  size_t s = header.find_first_not_of(' ', colon + 1);
  if (s == std::string::npos) throw Error("[npy] " + path + ": bad header");
  if (header[s] == '\'') return header.substr(s + 1, header.find('\'', s + 1) - s - 1);
  if (header[s] == '(') return header.substr(s + 1, header.find(')', s) - s - 1);
  return header.substr(s, header.find_first_of(",}", s) - s);
}

}  // namespace

TensorData read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("[npy] cannot open " + path);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw Error("[npy] " + path + " is not a .npy file");
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    hlen = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  }
  if (!f || hlen > (1u << 20)) throw Error("[npy] " + path + ": bad header length");
  std::string header(hlen, '\0');
  if (!f.read(header.data(), hlen)) throw Error("[npy] " + path + ": truncated header");
  std::string descr = value_of(header, "descr", path);
  // Unsigned 16/32/64-bit arrays are read widened, as the ONNX importer holds those types.
  size_t wide = descr == "<u2" ? 2 : descr == "<u4" ? 4 : descr == "<u8" ? 8 : 0;
  DType dt = wide == 2 ? DType::i32 : wide ? DType::i64 : dtype_of(descr, path);
  if (value_of(header, "fortran_order", path) != "False")
    throw Error("[npy] " + path + ": Fortran-order arrays are not supported");
  std::vector<int64_t> dims;
  const std::string shape_text = value_of(header, "shape", path);
  std::stringstream ss(shape_text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    const size_t e = item.find_last_not_of(' ');
    const std::string digits = item.substr(b, e - b + 1);
    int64_t d = -1;
    size_t used = 0;
    try {
      d = std::stoll(digits, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != digits.size() || d < 0)
      throw Error("[npy] " + path + ": shape (" + shape_text + ") has a dim that is not a size: '" + digits + "'");
    dims.push_back(d);
  }
  // Checked sizes, and against what the file holds, before anything is allocated: a header may
  // claim any shape.
  const int64_t count = checked_num_elements(dims, "[npy] " + path + ":");
  const int64_t nbytes = wide ? checked_nbytes(count, DType::i64, "[npy] " + path + ":") / 8 * static_cast<int64_t>(wide)
                              : checked_nbytes(count, dt, "[npy] " + path + ":");
  const std::streamoff at = f.tellg();
  f.seekg(0, std::ios::end);
  const std::streamoff left = f.tellg() - at;
  f.seekg(at);
  if (nbytes > left)
    throw Error("[npy] " + path + ": data is shorter than the shape " + Shape(dims).str() + " needs (" +
                std::to_string(left) + " of " + std::to_string(nbytes) + " bytes)");
  TensorData t(Shape(dims), dt);
  if (!wide) {  // straight into the tensor
    if (nbytes && !f.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(nbytes)))
      throw Error("[npy] " + path + ": cannot read its data");
    return t;
  }
  std::string raw(static_cast<size_t>(nbytes), '\0');
  if (nbytes && !f.read(raw.data(), static_cast<std::streamsize>(nbytes)))
    throw Error("[npy] " + path + ": cannot read its data");
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    uint64_t v = 0;
    std::memcpy(&v, raw.data() + static_cast<size_t>(i) * wide, wide);
    if (dt == DType::i32) t.ptr<int32_t>()[i] = static_cast<int32_t>(v);
    else t.ptr<int64_t>()[i] = static_cast<int64_t>(v);
  }
  return t;
}

void write_npy(const std::string& path, const TensorData& t) {
  std::string shape;
  for (int64_t d : t.shape().dims()) shape += std::to_string(d) + ", ";
  if (t.shape().rank() > 1) shape.resize(shape.size() - 1);
  if (t.shape().rank() > 1) shape.pop_back();
  std::string header = "{'descr': '" + std::string(descr_of(t.dtype())) + "', 'fortran_order': False, 'shape': (" +
                       (t.shape().rank() == 1 ? std::to_string(t.shape()[0]) + "," : shape) + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("[npy] cannot write " + path);
  f.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  f.write(len, 2);
  f << header;
  f.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  if (!f) throw Error("[npy] error writing " + path);
}

}  // namespace tg::tools
