#include "runtime/serialize.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <vector>

#include <cstring>
#include <string_view>
#include <type_traits>

#include "backends/cpu/profile.h"
#include "core/atomic_file.h"
#include "core/env.h"
#include "core/parallel.h"
#include "ir/verifier.h"
#include "ops/infer.h"
#include "tgraph/error.h"
#include "runtime/backend.h"

namespace tg::detail {
namespace {

constexpr char kMagic[8] = {'T', 'G', 'X', '\0', '\r', '\n', 0x1a, '\n'};
// Version 2: a variable's value is written once (version 1 also wrote its initial value with
// the Variable node: files twice the weights). Version 3: the device code section last
// (generated kernels: architecture, source, cubin); tensor data at 64-byte file offsets, so a
// load uses it where it lies instead of copying it; and a checksum over 64-bit words in four
// lanes (byte-at-a-time FNV-1a took 0.5 s of a 550 MB BERT file's 1.2-2.4 s load). All three
// versions are read.
// Version 4: the library choices (cuDNN / cuBLASLt algorithms) after the device code, and a
// checksum per 16 MiB chunk (ChunkedChecksum: checked on several threads).
// Version 5: the executable's switches (CompileOptions::switches), and for dynamic feed dims
// the graph it was compiled from with its feeds, targets and options (SpecializeSource): a
// loaded executable compiles its copy per size from what the saved one did. Before, it
// compiled from its own optimised graph, where fused groups and rewrites of the first compile
// do not come apart again: BERT-base f16 from tgraph.torch's compile cache ran 2.2-5.7x slower
// than compiled in the process (session 32). The source's constants that are the optimised
// graph's bytes too are written as a reference to them (kSameAs).
constexpr uint32_t kVersion = 5;
constexpr size_t kDataAlign = 64;   // file offset of version 3's tensor data
constexpr size_t kHeaderBytes = 32;
constexpr int64_t kSavedValue = 2;  // a Variable node's data flag: "its value in the variables section"
constexpr int64_t kSameAs = 3;      // a source graph node's data flag: "the bytes of this optimised-graph node"
constexpr const char* kDumpSwitch = "TGRAPH_DUMP";

constexpr uint64_t kFnvStart = 1469598103934665603ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;
uint64_t fnv1a(const char* p, size_t n, uint64_t h = kFnvStart) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * kFnvPrime;
  return h;
}

// Version 3's checksum: FNV-1a's step over 64-bit words, four independent lanes taking every
// fourth word (32-byte blocks), the tail bytes and the length folded in at the end. Each lane's
// step is a bijection of its state, so any one changed word changes the result.
class Checksum {
 public:
  void update(const char* p, size_t n) {
    total_ += n;
    if (fill_ > 0) {
      const size_t k = std::min(n, sizeof buf_ - fill_);
      std::memcpy(buf_ + fill_, p, k);
      fill_ += k, p += k, n -= k;
      if (fill_ < sizeof buf_) return;
      block(buf_);
      fill_ = 0;
    }
    for (; n >= sizeof buf_; p += sizeof buf_, n -= sizeof buf_) block(p);
    std::memcpy(buf_, p, n);
    fill_ = n;
  }
  uint64_t value() const {
    uint64_t h = fnv1a(buf_, fill_);
    for (uint64_t l : lane_) h = (h ^ l) * kFnvPrime;
    h = (h ^ total_) * kFnvPrime;
    return h ^ (h >> 29);
  }

 private:
  void block(const char* p) {
    for (int i = 0; i < 4; ++i) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      lane_[i] = (lane_[i] ^ w) * kFnvPrime;
    }
  }
  uint64_t lane_[4] = {kFnvStart, kFnvStart ^ 1, kFnvStart ^ 2, kFnvStart ^ 3};
  char buf_[32];
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

// Version 4's checksum: Checksum over each 16 MiB chunk of the payload, then FNV-1a's step over
// the chunks' values and the length. A load checks the chunks on several threads (version 3's
// one pass took 26-40 ms of a 217-440 MB file's load on the H200 machine); a save keeps the
// chunks as it writes.
class ChunkedChecksum {
 public:
  static constexpr size_t kChunk = size_t(16) << 20;
  void update(const char* p, size_t n) {
    while (n > 0) {
      const size_t k = std::min(n, kChunk - in_chunk_);
      cur_.update(p, k);
      in_chunk_ += k, total_ += k, p += k, n -= k;
      if (in_chunk_ == kChunk) {
        chunks_.push_back(cur_.value());
        cur_ = Checksum();
        in_chunk_ = 0;
      }
    }
  }
  uint64_t value() const {
    std::vector<uint64_t> all = chunks_;
    if (in_chunk_ > 0 || all.empty()) all.push_back(cur_.value());
    return combine(all, total_);
  }
  /// The value of `n` bytes at `p` at once, up to 8 threads over the chunks.
  static uint64_t of(const char* p, size_t n) {
    const size_t count = n == 0 ? 1 : (n + kChunk - 1) / kChunk, parts = parallel_parts(count);
    std::vector<uint64_t> all(count);
    run_in_parts(parts, [&](size_t t) {
      for (size_t i = t; i < count; i += parts) {
        Checksum c;
        const size_t at = i * kChunk;
        c.update(p + at, std::min(kChunk, n - std::min(n, at)));
        all[i] = c.value();
      }
    });
    return combine(all, n);
  }

 private:
  static uint64_t combine(const std::vector<uint64_t>& chunks, uint64_t total) {
    uint64_t h = kFnvStart;
    for (uint64_t c : chunks) h = (h ^ c) * kFnvPrime;
    h = (h ^ total) * kFnvPrime;
    return h ^ (h >> 31);
  }
  Checksum cur_;
  size_t in_chunk_ = 0;
  uint64_t total_ = 0;
  std::vector<uint64_t> chunks_;
};

// Bytes on to the file as they come: small pieces gathered in `out`, tensor data passed
// straight through; the payload's checksum and size kept as they go.
struct Writer {
  AtomicFile& sink;
  std::vector<char> out;
  ChunkedChecksum hash;
  size_t size = 0;
  void raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    hash.update(c, n);
    size += n;
    if (n >= (64u << 10)) {
      flush();
      sink.write(c, n);
      return;
    }
    out.insert(out.end(), c, c + n);
    if (out.size() >= (1u << 20)) flush();
  }
  void flush() {
    if (!out.empty()) sink.write(out.data(), out.size());
    out.clear();
  }
  void i64(int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void str(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    raw(s.data(), s.size());
  }
  void ids(const std::vector<int32_t>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (int32_t x : v) i64(x);
  }
  template <class T>
  void value(const T& v) {
    if constexpr (Reflected<T>) {
      std::apply([&](const auto&... f) { (value(f), ...); }, v.fields());
    } else if constexpr (std::is_same_v<T, std::string>) {
      str(v);
    } else if constexpr (requires { v.begin(); v.size(); }) {
      i64(static_cast<int64_t>(v.size()));
      for (const auto& e : v) value(e);
    } else if constexpr (std::is_floating_point_v<T>) {
      f64(static_cast<double>(v));
    } else {
      i64(static_cast<int64_t>(v));
    }
  }
  void type(const TensorType& t) {
    i64(t.shape.ranked() ? 1 : 0);
    value(t.shape.dims());
    i64(static_cast<int64_t>(t.dtype));
  }
  void data(const TensorData& t) {
    i64(t.empty() ? 0 : 1);
    if (t.empty()) return;
    type(t.type());
    static const char zeros[kDataAlign] = {};
    raw(zeros, (kDataAlign - (kHeaderBytes + size) % kDataAlign) % kDataAlign);
    raw(t.data(), t.nbytes());
  }
};

struct Reader {
  const char* p;
  size_t n, at = 0;
  int64_t version = kVersion;
  std::shared_ptr<std::byte> owner;  // the file's bytes when tensors may point into them
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("[load] corrupt executable file: " + what + " at byte " + std::to_string(at));
  }
  void raw(void* dst, size_t k) {
    if (k > n - at) fail("truncated");
    std::memcpy(dst, p + at, k);
    at += k;
  }
  int64_t i64() {
    int64_t v;
    raw(&v, 8);
    return v;
  }
  double f64() {
    double v;
    raw(&v, 8);
    return v;
  }
  int64_t count(int64_t max) {
    int64_t c = i64();
    if (c < 0 || c > max) fail("bad count " + std::to_string(c));
    return c;
  }
  std::string str() {
    int64_t k = count(static_cast<int64_t>(n - at));
    std::string s(static_cast<size_t>(k), '\0');
    raw(s.data(), static_cast<size_t>(k));
    return s;
  }
  int32_t id(int64_t limit) {
    int64_t v = i64();
    if (v < -1 || v >= limit) fail("bad id " + std::to_string(v));
    return static_cast<int32_t>(v);
  }
  std::vector<int32_t> ids(int64_t limit) {
    std::vector<int32_t> v(static_cast<size_t>(count(static_cast<int64_t>(n - at) / 8)));
    for (auto& x : v) x = id(limit);
    return v;
  }
  template <class T>
  void value(T& v) {
    if constexpr (Reflected<T>) {
      std::apply([&](auto&... f) { (value(f), ...); }, v.fields());
    } else if constexpr (std::is_same_v<T, std::string>) {
      v = str();
    } else if constexpr (requires { v.begin(); v.size(); v.resize(0); }) {
      v.resize(static_cast<size_t>(count(static_cast<int64_t>(n - at) / 8)));
      for (auto& e : v) value(e);
    } else if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(f64());
    } else if constexpr (std::is_enum_v<T>) {
      v = static_cast<T>(i64());
    } else {
      v = static_cast<T>(i64());
    }
  }
  DType dtype() {
    int64_t d = i64();
    if (d < 0 || d >= kNumDTypes) fail("bad dtype");
    return static_cast<DType>(d);
  }
  TensorType type() {
    bool ranked = i64() != 0;
    std::vector<int64_t> dims;
    value(dims);
    DType t = dtype();
    return TensorType(ranked ? Shape(dims) : Shape::unranked(), t);
  }
  // `saved_value`: the node's data is its variable's saved value (version 2), read later.
  // `same_as` (version 5's source graph): set to the optimised-graph node whose bytes it is.
  TensorData data(bool* saved_value = nullptr, int64_t* same_as = nullptr) {
    const int64_t flag = i64();
    if (flag == 0) return {};
    if (flag == kSavedValue && saved_value) {
      *saved_value = true;
      return {};
    }
    if (flag == kSameAs && same_as) {
      *same_as = i64();
      if (*same_as < 0) fail("bad tensor reference");
      return {};
    }
    if (flag != 1) fail("bad tensor data flag");
    TensorType t = type();
    if (!t.shape.is_static()) fail("tensor data with a dynamic shape");
    for (int64_t d : t.shape.dims())
      if (d > static_cast<int64_t>(n)) fail("tensor dims larger than the file");
    if (version >= 3) {  // padding to the file's 64-byte offset of the data
      const size_t pad = (kDataAlign - (kHeaderBytes + at) % kDataAlign) % kDataAlign;
      if (pad > n - at) fail("truncated");
      at += pad;
    }
    const size_t nbytes = static_cast<size_t>(checked_nbytes(t.shape.num_elements(), t.dtype, "[load]"));
    if (nbytes > n - at) fail("truncated tensor data");
    if (owner && version >= 3 && reinterpret_cast<uintptr_t>(p + at) % kDataAlign == 0 && nbytes > 0) {
      TensorData d = TensorData::wrap(t.shape, t.dtype,
                                      std::shared_ptr<std::byte>(owner, reinterpret_cast<std::byte*>(const_cast<char*>(p + at))));
      at += nbytes;
      return d;
    }
    TensorData d(t.shape, t.dtype);
    raw(d.data(), d.nbytes());
    return d;
  }
};

// The default-constructed descriptor of each op (its type comes from the op list).
Attr default_attr(OpKind k) {
  switch (k) {
#define X(e, name, family, desc) \
  case OpKind::e: return desc{};
#include "ops/op_list.h"
#undef X
    default: return NoDesc{};
  }
}

}  // namespace

namespace {

// The generated kernels the executable's runs used (and its copies per size), each with its
// cubin: read from a loaded file, the NVRTC caches, or compiled now. None without CUDA.
void write_device_code(Writer& w, const ExecutableImpl& exe) {
  std::map<std::string, DeviceCode::Kernel> all;
  std::map<std::string, std::string> plans;
  auto gather = [&](const ExecutableImpl& e) {
    std::map<std::string, std::function<std::string()>> later;
    {
      std::lock_guard<std::mutex> lock(e.device_code->mu);
      for (const auto& [key, k] : e.device_code->kernels) all.try_emplace(key, k);
      for (const auto& [key, v] : e.device_code->plans) plans.try_emplace(key, v);
      later = e.device_code->later;
    }
    for (const auto& [key, value] : later)  // outside the lock: a plan may still be being built
      if (!plans.count(key))
        if (std::string v = value(); !v.empty()) plans.emplace(key, std::move(v));
  };
  gather(exe);
  std::vector<std::shared_ptr<const ExecutableImpl>> copies;  // gathered outside the lock (a
  {                                                           // later plan may be waited for)
    std::lock_guard<std::mutex> lock(exe.specialized_mu);
    for (const auto& [types, copy] : exe.specialized)
      if (copy) copies.push_back(copy);  // null: a size its compile refused
  }
  for (const auto& copy : copies) gather(*copy);
  std::vector<const DeviceCode::Kernel*> out;
  // The kernels are CUDA's (NVRTC, sm_<major><minor>), whatever device the executable runs on.
  const Backend* backend = find_backend(Device::Kind::cuda);
  for (auto& [key, k] : all)
    if (backend && backend->device_code_ready(k)) out.push_back(&k);
  w.i64(static_cast<int64_t>(out.size()));
  for (const DeviceCode::Kernel* k : out) {
    w.i64(k->major);
    w.i64(k->minor);
    w.str(k->source);
    w.str(std::string(k->cubin.begin(), k->cubin.end()));
  }
  w.i64(static_cast<int64_t>(plans.size()));  // version 4: the library choices
  for (const auto& [key, value] : plans) {
    w.str(key);
    w.str(value);
  }
}

// A graph's values, nodes and blocks; `data` writes each node's tensor data (or a flag).
void write_graph(Writer& w, const GraphImpl& g, const std::function<void(const Node&)>& data) {
  w.i64(static_cast<int64_t>(g.values.size()));
  for (const Value& v : g.values) {
    w.type(v.type);
    w.i64(v.node);
    w.i64(v.index);
    w.i64(v.block);
    w.str(v.name);
  }
  w.i64(static_cast<int64_t>(g.nodes.size()));
  for (const Node& n : g.nodes) {
    w.str(op_name(n.kind));  // by name: op enum values may move between versions
    w.i64(n.block);
    w.ids(n.inputs);
    w.ids(n.outputs);
    w.ids(n.control_deps);
    w.ids(n.regions);
    std::visit([&](const auto& d) { w.value(d); }, n.attr);
    data(n);
    w.str(n.name);
  }
  w.i64(static_cast<int64_t>(g.blocks.size()));
  for (const Block& b : g.blocks) {
    w.ids(b.nodes);
    w.ids(b.params);
    w.ids(b.results);
    w.i64(b.parent_node);
    w.i64(b.parent_block);
  }
}

// Version 5: the executable's switches, but TGRAPH_DUMP (a directory of this machine to write
// into, not carried to another).
void write_switches(Writer& w, const ExecutableImpl& exe) {
  std::map<std::string, std::string> switches = exe.switches;
  switches.erase(kDumpSwitch);
  w.i64(static_cast<int64_t>(switches.size()));
  for (const auto& [name, value] : switches) {
    w.str(name);
    w.str(value);
  }
}

// Version 5, after the switches: the graph a dynamic executable compiles its copies per size
// from (flag 0: none). Its constants that hold the optimised graph's bytes are references.
void write_specialize_source(Writer& w, const ExecutableImpl& exe) {
  const SpecializeSource* src = exe.specialize.get();
  w.i64(src ? 1 : 0);
  if (!src) return;
  std::map<const void*, int32_t> module_bytes;  // data address -> optimised-graph node
  const GraphImpl& m = exe.module.graph;
  for (size_t i = 0; i < m.nodes.size(); ++i)
    if (m.nodes[i].kind != OpKind::Variable && !m.nodes[i].data.empty())
      module_bytes.emplace(m.nodes[i].data.data(), static_cast<int32_t>(i));
  write_graph(w, src->graph, [&](const Node& n) {
    if (n.kind == OpKind::Variable && exe.variables.count(std::get<NameDesc>(n.attr).name)) {
      w.i64(kSavedValue);  // its value is the loaded executable's
      return;
    }
    if (!n.data.empty()) {
      auto it = module_bytes.find(n.data.data());
      if (it != module_bytes.end() && m.nodes[static_cast<size_t>(it->second)].data.type() == n.data.type()) {
        w.i64(kSameAs);
        w.i64(it->second);
        return;
      }
    }
    w.data(n.data);
  });
  w.ids(src->feeds);
  w.ids(src->targets);
  w.ids(src->ops);
  w.i64(src->options.optimize ? 1 : 0);
  // A saved executable returns its outputs in their own layouts (save refuses free ones), and
  // its copies must too: the loaded one keeps no layouts to compare theirs with.
  w.i64(0);
}

// The payload: graph, plan inputs, feeds and the variables at their current values.
void write_payload(Writer& w, const ExecutableImpl& exe) {
  w.i64(static_cast<int64_t>(exe.device.kind));
  w.i64(exe.device.index);
  w.i64(static_cast<int64_t>(exe.precision));
  write_graph(w, exe.module.graph, [&](const Node& n) {
    if (n.kind == OpKind::Variable && exe.variables.count(std::get<NameDesc>(n.attr).name))
      w.i64(kSavedValue);  // written once, at its current value, with the variables below
    else
      w.data(n.data);
  });
  w.ids(exe.module.feeds);
  w.ids(exe.module.targets);
  w.ids(exe.module.target_ops);
  w.i64(exe.module.dynamic_shapes ? 1 : 0);
  w.i64(static_cast<int64_t>(exe.feed_names.size()));
  for (size_t i = 0; i < exe.feed_names.size(); ++i) {
    w.str(exe.feed_names[i]);
    w.type(exe.feed_types[i]);
  }
  {  // Variables at their current values (a trained model saves its weights).
    std::lock_guard<std::mutex> lock(exe.store->mu);
    w.i64(static_cast<int64_t>(exe.variables.size()));
    for (const auto& [name, id] : exe.variables) {
      w.str(name);
      w.data(exe.store->value(name));
    }
  }
  write_device_code(w, exe);
  write_switches(w, exe);
  write_specialize_source(w, exe);
}

std::array<char, kHeaderBytes> header(size_t payload, uint64_t hash) {
  std::array<char, kHeaderBytes> h{};
  const int64_t fields[3] = {kVersion, static_cast<int64_t>(payload), static_cast<int64_t>(hash)};
  std::memcpy(h.data(), kMagic, 8);
  std::memcpy(h.data() + 8, fields, sizeof fields);
  return h;
}

}  // namespace

void write_executable(const ExecutableImpl& exe, AtomicFile& f) {
  // The header holds the payload's size and checksum: a placeholder first, the real one last.
  std::array<char, kHeaderBytes> h{};
  f.write(h.data(), h.size());
  Writer w{f};
  write_payload(w, exe);
  w.flush();
  h = header(w.size, w.hash.value());
  f.write_at(0, h.data(), h.size());
}

namespace {

// write_graph's inverse, with the cross-references the verifier does not check by itself.
// `same_as` (the source graph's): per node, the optimised-graph node whose bytes it holds, or -1.
void read_graph(Reader& r, GraphImpl& g, int64_t max_items, std::vector<int64_t>* same_as) {
  g.values.resize(static_cast<size_t>(r.count(max_items)));
  const int64_t nv = static_cast<int64_t>(g.values.size());
  for (Value& v : g.values) {
    v.type = r.type();
    v.node = static_cast<int32_t>(r.i64());
    v.index = static_cast<int32_t>(r.i64());
    v.block = static_cast<int32_t>(r.i64());
    v.name = r.str();
  }
  g.nodes.resize(static_cast<size_t>(r.count(max_items)));
  const int64_t nn = static_cast<int64_t>(g.nodes.size());
  if (same_as) same_as->assign(g.nodes.size(), -1);
  for (Node& n : g.nodes) {
    std::string name = r.str();
    try {
      n.kind = op_kind_from_name(name);
    } catch (const Error&) {
      r.fail("unknown op '" + name + "' (written by a newer tgraph?)");
    }
    n.block = static_cast<int32_t>(r.i64());
    n.inputs = r.ids(nv);
    n.outputs = r.ids(nv);
    n.control_deps = r.ids(nn);
    n.regions = r.ids(max_items);
    n.attr = default_attr(n.kind);
    std::visit([&](auto& d) { r.value(d); }, n.attr);
    bool saved_value = false;  // filled from the variables section
    n.data = r.data(n.kind == OpKind::Variable ? &saved_value : nullptr,
                    same_as ? &(*same_as)[static_cast<size_t>(&n - g.nodes.data())] : nullptr);
    n.name = r.str();
  }
  g.blocks.resize(static_cast<size_t>(r.count(max_items)));
  const int64_t nb = static_cast<int64_t>(g.blocks.size());
  for (Block& b : g.blocks) {
    b.nodes = r.ids(nn);
    b.params = r.ids(nv);
    b.results = r.ids(nv);
    b.parent_node = r.id(nn);
    b.parent_block = r.id(nb);
  }
  // Blocks nest strictly (a parent precedes its child), so walking them cannot cycle.
  if (nb == 0) r.fail("no blocks");
  for (int64_t i = 0; i < nb; ++i) {
    const Block& b = g.blocks[static_cast<size_t>(i)];
    if (i == 0 ? b.parent_block != -1 : (b.parent_block < 0 || b.parent_block >= i)) r.fail("bad block nesting");
    for (const std::vector<int32_t>* ids : {&b.nodes, &b.params, &b.results})  // ids() lets -1 through
      for (int32_t id : *ids)
        if (id < 0) r.fail("bad block member");
  }
  for (const Value& v : g.values)
    if (v.node < -1 || v.node >= nn || v.block < 0 || v.block >= nb) r.fail("bad value");
  for (const Node& n : g.nodes) {
    if (n.block < 0 || n.block >= nb) r.fail("bad node block");
    for (int32_t b : n.regions)
      if (b <= n.block || b >= nb || g.blocks[static_cast<size_t>(b)].parent_block != n.block ||
          g.blocks[static_cast<size_t>(b)].parent_node != static_cast<int32_t>(&n - g.nodes.data()))
        r.fail("bad region");
    for (int32_t v : n.inputs)
      if (v < 0) r.fail("bad input");
    for (int32_t d : n.control_deps)
      if (d < 0) r.fail("bad control dependency");
    for (int32_t v : n.outputs)
      if (v < 0) r.fail("bad output");
    // A constant's bytes are what its value's type says (kernels read by the type).
    if (n.kind == OpKind::Constant && !n.data.empty() &&
        (n.outputs.size() != 1 || !(n.data.type() == g.values[static_cast<size_t>(n.outputs[0])].type)))
      r.fail("constant data of another type than its value");
  }
}

}  // namespace

std::shared_ptr<ExecutableImpl> deserialize_executable(const std::string& bytes) {
  return deserialize_executable(bytes.data(), bytes.size(), nullptr);
}

std::shared_ptr<ExecutableImpl> deserialize_executable(const char* data, size_t n, std::shared_ptr<std::byte> owner) {
  const std::string_view bytes(data, n);
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 8) != 0)
    throw Error("[load] not a tgraph executable file (bad magic)");
  Reader head{bytes.data(), bytes.size(), 8};
  int64_t version = head.i64(), size = head.i64();
  uint64_t sum = static_cast<uint64_t>(head.i64());
  if (version < 1 || version > kVersion)
    throw Error("[load] executable file version " + std::to_string(version) + " is not supported (this tgraph reads " +
                std::to_string(kVersion) + ")");
  if (size < 0 || static_cast<size_t>(size) != bytes.size() - 32)
    throw Error("[load] executable file is truncated or padded: payload " + std::to_string(bytes.size() - 32) +
                " bytes, header says " + std::to_string(size));
  uint64_t got;
  {
    CpuProfileScope timed("load: checksum");
    if (version >= 4) {
      got = ChunkedChecksum::of(bytes.data() + kHeaderBytes, static_cast<size_t>(size));
    } else if (version >= 3) {
      Checksum c;
      c.update(bytes.data() + kHeaderBytes, static_cast<size_t>(size));
      got = c.value();
    } else {
      got = fnv1a(bytes.data() + kHeaderBytes, static_cast<size_t>(size));
    }
  }
  if (got != sum) throw Error("[load] executable file checksum mismatch");
  CpuProfileScope timed("load: deserialize");
  return deserialize_payload(bytes.data() + kHeaderBytes, static_cast<size_t>(size), version, std::move(owner));
}

std::shared_ptr<ExecutableImpl> deserialize_payload(const char* data, size_t size, int64_t version,
                                                    std::shared_ptr<std::byte> owner) {
  Reader r{data, size};
  r.version = version;
  r.owner = std::move(owner);
  auto exe = std::make_shared<ExecutableImpl>();
  int64_t kind = r.i64();
  if (kind != 0 && kind != 1) r.fail("bad device");
  exe->device = Device{static_cast<Device::Kind>(kind), static_cast<int>(r.i64())};
  exe->precision = static_cast<Precision>(r.i64() & 3);
  GraphImpl& g = exe->module.graph;
  g.allow_tf32 = exe->precision == Precision::tf32;  // bf16 / f16 casts are in the saved graph
  const int64_t max_items = static_cast<int64_t>(size) / 8;
  read_graph(r, g, max_items, nullptr);
  const int64_t nv = static_cast<int64_t>(g.values.size()), nn = static_cast<int64_t>(g.nodes.size());
  exe->module.feeds = r.ids(nv);
  exe->module.targets = r.ids(nv);
  exe->module.target_ops = r.ids(nn);
  for (int32_t v : exe->module.feeds)
    if (v < 0) r.fail("bad feed");
  for (int32_t v : exe->module.targets)
    if (v < 0) r.fail("bad target");
  exe->module.dynamic_shapes = r.i64() != 0;
  int64_t nf = r.count(max_items);
  if (nf != static_cast<int64_t>(exe->module.feeds.size())) r.fail("feed count");
  for (int64_t i = 0; i < nf; ++i) {
    exe->feed_names.push_back(r.str());
    exe->feed_types.push_back(r.type());
  }
  exe->store = std::make_shared<VariableStore>();
  int64_t nvar = r.count(max_items);
  for (int64_t i = 0; i < nvar; ++i) {
    std::string name = r.str();
    TensorData d = r.data();
    if (d.empty()) r.fail("variable without a value");
    exe->store->values[name] = d;
  }
  if (version >= 3) {  // device code: kept with the executable, handed to NVRTC's cache on load
    const int64_t nk = r.count(max_items);
    for (int64_t i = 0; i < nk; ++i) {
      DeviceCode::Kernel k;
      const int64_t major = r.i64(), minor = r.i64();
      if (major < 1 || major > 99 || minor < 0 || minor > 9) r.fail("bad architecture");
      k.major = static_cast<int>(major);
      k.minor = static_cast<int>(minor);
      k.source = r.str();
      const std::string cubin = r.str();
      if (k.source.empty() || cubin.empty()) r.fail("empty kernel");
      k.cubin.assign(cubin.begin(), cubin.end());
      const std::string key = device_code_key(k.major, k.minor, k.source);
      exe->device_code->kernels.emplace(key, std::move(k));
    }
  }
  if (version >= 4) {  // library choices: hints the backend checks before it uses them
    const int64_t np = r.count(max_items);
    for (int64_t i = 0; i < np; ++i) {
      std::string key = r.str(), value = r.str();
      if (key.empty()) r.fail("empty library plan key");
      exe->device_code->plans[std::move(key)] = std::move(value);
    }
  }
  std::shared_ptr<SpecializeSource> source;  // version 5: switches, and a dynamic one's source graph
  std::vector<int64_t> same_as;
  if (version >= 5) {
    const int64_t ns = r.count(max_items);
    for (int64_t i = 0; i < ns; ++i) {
      std::string name = r.str(), value = r.str();
      try {
        check_switch_name(name);
      } catch (const Error&) {
        r.fail("unknown switch '" + name + "'");
      }
      if (name == kDumpSwitch) r.fail("switch " + name + " is never saved");
      exe->switches[std::move(name)] = std::move(value);
    }
    const int64_t has_source = r.i64();
    if (has_source != 0 && has_source != 1) r.fail("bad source graph flag");
    if (has_source == 1) {
      source = std::make_shared<SpecializeSource>();
      read_graph(r, source->graph, max_items, &same_as);
      const int64_t snv = static_cast<int64_t>(source->graph.values.size());
      source->feeds = r.ids(snv);
      source->targets = r.ids(snv);
      source->ops = r.ids(static_cast<int64_t>(source->graph.nodes.size()));
      for (const std::vector<int32_t>* ids : {&source->feeds, &source->targets, &source->ops})
        for (int32_t id : *ids)
          if (id < 0) r.fail("bad source graph feed, target or op");
      source->options.optimize = r.i64() != 0;
      if (r.i64() != 0) r.fail("a source graph with free output layouts");
    }
  }
  if (r.at != r.n) r.fail("trailing bytes");
  {
    CpuProfileScope timed("load: deserialize: variables' initial values");
    std::vector<std::pair<Node*, const TensorData*>> copies;
    size_t bytes = 0;
    for (const Block& b : g.blocks)
      for (int32_t id : b.nodes) {
        Node& n = g.nodes[static_cast<size_t>(id)];
        if (n.kind == OpKind::Variable) {
          const std::string& name = std::get<NameDesc>(n.attr).name;
          auto it = exe->store->values.find(name);
          if (it == exe->store->values.end()) r.fail("variable '" + name + "' has no value");
          if (n.outputs.size() != 1 || !(it->second.type() == g.values[static_cast<size_t>(n.outputs[0])].type))
            r.fail("variable '" + name + "' has a value of another type");
          exe->variables[name] = id;
          if (n.data.empty()) {  // its initial value, as saved: a copy of its own
            copies.emplace_back(&n, &it->second);
            bytes += static_cast<size_t>(it->second.nbytes());
          }
          g.variables[name] = id;
        }
      }
    // Fresh memory is written at the speed of its page faults (~2 GB/s on one thread: 0.1 s of
    // a ResNet-50 step's load), so large models copy on several threads.
    const size_t parts = bytes < (size_t(64) << 20) ? 1 : parallel_parts(copies.size());
    run_in_parts(parts, [&](size_t t) {
      for (size_t i = t; i < copies.size(); i += parts) copies[i].first->data = copies[i].second->clone();
    });
  }
  try {
    CpuProfileScope timed("load: deserialize: verify");
    verify_or_throw(g);
  } catch (const Error& e) {
    throw Error(std::string("[load] the executable's graph does not verify: ") + e.what());
  }
  if (source) {  // its tensors: the optimised graph's where they are the same bytes
    GraphImpl& sg = source->graph;
    const int64_t nn = static_cast<int64_t>(g.nodes.size());
    for (size_t i = 0; i < sg.nodes.size(); ++i) {
      Node& n = sg.nodes[i];
      if (const int64_t at = same_as[i]; at >= 0) {
        if (at >= nn || g.nodes[static_cast<size_t>(at)].kind == OpKind::Variable ||
            g.nodes[static_cast<size_t>(at)].data.empty() || n.outputs.size() != 1 ||
            !(g.nodes[static_cast<size_t>(at)].data.type() == sg.values[static_cast<size_t>(n.outputs[0])].type))
          r.fail("bad tensor reference " + std::to_string(at));
        n.data = g.nodes[static_cast<size_t>(at)].data;
      }
      if (n.kind != OpKind::Variable) continue;
      const std::string& name = std::get<NameDesc>(n.attr).name;
      if (n.data.empty()) {  // the executable's own variable
        auto it = g.variables.find(name);
        if (it == g.variables.end()) r.fail("source graph variable '" + name + "' has no value");
        n.data = g.nodes[static_cast<size_t>(it->second)].data;
      }
      if (n.outputs.size() != 1 || !(n.data.type() == sg.values[static_cast<size_t>(n.outputs[0])].type))
        r.fail("source graph variable '" + name + "' has a value of another type");
      sg.variables[name] = static_cast<int32_t>(i);
    }
    try {
      CpuProfileScope timed("load: deserialize: verify the source graph");
      verify_or_throw(sg);
    } catch (const Error& e) {
      throw Error(std::string("[load] the executable's source graph does not verify: ") + e.what());
    }
    sg.variable_store = exe->store;
    source->options.device = exe->device;
    source->options.precision = exe->precision;
    source->options.switches = exe->switches;
    source->options.disable_type_inference = true;
    source->declared = exe->feed_types;
    exe->specialize = std::move(source);
  }
  // Ready for its backend's runs (a build without that backend refuses the file in load()).
  CpuProfileScope timed("load: deserialize: backend's prepare");
  if (const Backend* b = find_backend(exe->device.kind)) b->prepare(*exe);
  return exe;
}

}  // namespace tg::detail
