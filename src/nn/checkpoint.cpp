// Checkpoint files: validated completely before any variable is touched, written atomically.
#include "tgraph/checkpoint.h"

#include <cstring>
#include <map>
#include <set>

#include "core/atomic_file.h"
#include "core/read_file.h"
#include "tgraph/error.h"

namespace tg {

namespace {

constexpr char kMagic[8] = {'T', 'G', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeader = 8 + 4 + 4 + 8 + 8;

uint64_t fnv1a(const std::string& s, size_t from) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = from; i < s.size(); ++i) {
    h ^= static_cast<unsigned char>(s[i]);
    h *= 1099511628211ull;
  }
  return h;
}

template <class T>
void put(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
}

template <class T>
void put_at(std::string& out, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[at + i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
}

// Bounds-checked little-endian reader over the file's bytes.
struct Reader {
  const std::string& s;
  size_t pos;
  const std::string& path;
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("[checkpoint] " + path + ": " + what);
  }
  template <class T>
  T get(const char* what) {
    if (s.size() - pos < sizeof(T)) fail(std::string("truncated (while reading ") + what + ")");
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
    pos += sizeof(T);
    return static_cast<T>(v);
  }
  std::string bytes(uint64_t n, const char* what) {
    if (s.size() - pos < n) fail(std::string("truncated (while reading ") + what + ")");
    std::string r = s.substr(pos, n);
    pos += n;
    return r;
  }
};

bool valid_dtype(uint8_t d) { return d < kNumDTypes; }

}  // namespace

void save_checkpoint(const Executable& exe, const std::string& path) {
  std::string out(kMagic, sizeof kMagic);
  put<uint32_t>(out, kVersion);
  std::vector<std::string> names = exe.variable_names();
  put<uint32_t>(out, static_cast<uint32_t>(names.size()));
  put<uint64_t>(out, 0);  // payload size, filled below
  put<uint64_t>(out, 0);  // checksum, filled below
  for (const std::string& name : names) {
    TensorData v = exe.variable(name);
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out += name;
    put<uint8_t>(out, static_cast<uint8_t>(v.dtype()));
    put<uint32_t>(out, static_cast<uint32_t>(v.shape().rank()));
    for (int64_t d : v.shape().dims()) put<int64_t>(out, d);
    put<uint64_t>(out, v.nbytes());
    out.append(static_cast<const char*>(v.data()), v.nbytes());
  }
  put_at<uint64_t>(out, 16, out.size() - kHeader);
  put_at<uint64_t>(out, 24, fnv1a(out, kHeader));

  // A crash or a second writer leaves either the old checkpoint or a whole new one.
  detail::write_file_atomic(path, out.data(), out.size(), "checkpoint");
}

std::vector<std::string> load_checkpoint(const Executable& exe, const std::string& path,
                                         const LoadCheckpointOptions& options) {
  detail::remove_stale_temps(path);
  const std::string s = detail::read_file(path, "checkpoint");
  Reader r{s, 0, path};
  if (s.size() < sizeof kMagic || std::memcmp(s.data(), kMagic, sizeof kMagic) != 0)
    r.fail("not a tgraph checkpoint (bad magic)");
  r.pos = sizeof kMagic;
  uint32_t version = r.get<uint32_t>("version");
  if (version != kVersion)
    r.fail("version " + std::to_string(version) + " is not supported (this build reads " +
           std::to_string(kVersion) + ")");
  uint32_t count = r.get<uint32_t>("count");
  uint64_t payload = r.get<uint64_t>("payload size");
  uint64_t checksum = r.get<uint64_t>("checksum");
  if (s.size() - kHeader != payload)
    r.fail("truncated or padded: payload is " + std::to_string(s.size() - kHeader) + " bytes, header says " +
           std::to_string(payload));
  if (fnv1a(s, kHeader) != checksum) r.fail("checksum mismatch (the file is corrupt)");

  std::map<std::string, TensorData> values;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = r.get<uint32_t>("name length");
    std::string name = r.bytes(len, "name");
    uint8_t dt = r.get<uint8_t>("dtype");
    if (!valid_dtype(dt)) r.fail("variable '" + name + "' has an unknown dtype code " + std::to_string(dt));
    uint32_t rank = r.get<uint32_t>("rank");
    if (rank > 64) r.fail("variable '" + name + "' has rank " + std::to_string(rank));
    std::vector<int64_t> dims;
    for (uint32_t d = 0; d < rank; ++d) {
      int64_t v = r.get<int64_t>("dims");
      if (v < 0) r.fail("variable '" + name + "' has a negative dimension");
      dims.push_back(v);
    }
    TensorData t(Shape(dims), static_cast<DType>(dt));
    uint64_t nbytes = r.get<uint64_t>("byte count");
    if (nbytes != t.nbytes())
      r.fail("variable '" + name + "' holds " + std::to_string(nbytes) + " bytes, its type " + t.type().str() +
             " needs " + std::to_string(t.nbytes()));
    std::string bytes = r.bytes(nbytes, "values");
    if (nbytes) std::memcpy(t.data(), bytes.data(), nbytes);
    if (!values.emplace(name, std::move(t)).second) r.fail("variable '" + name + "' appears twice");
  }
  if (r.pos != s.size()) r.fail("trailing bytes after the last variable");

  // Check every name and type against the executable before writing anything.
  std::vector<std::string> restored;
  for (const std::string& name : exe.variable_names()) {
    auto it = values.find(name);
    if (it == values.end()) {
      if (options.strict) r.fail("has no variable '" + name + "' (the executable uses it)");
      continue;
    }
    TensorType want = exe.variable(name).type();
    if (!(it->second.type() == want))
      r.fail("variable '" + name + "' is " + it->second.type().str() + " in the file, the executable's is " +
             want.str());
    restored.push_back(name);
  }
  for (const std::string& name : restored) exe.set_variable(name, values.at(name));
  return restored;
}

}  // namespace tg
