#include "backends/cuda/cuda_control_flow.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"

namespace tg::detail {
namespace {

// Streams live as long as the process (like the device context's): buffers freed later may
// still name them. Index 0 is the side stream of uploads into graph memory, k >= 1 captures depth-k bodies.
cudaStream_t stream_at(int device, int k) {
  static std::mutex mu;
  static std::map<int, std::vector<cudaStream_t>> streams;
  std::lock_guard<std::mutex> lock(mu);
  auto& v = streams[device];
  while (static_cast<int>(v.size()) <= k) {
    cudaStream_t s = nullptr;
    TG_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    v.push_back(s);
  }
  return v[static_cast<size_t>(k)];
}

cudaGraph_t capturing_graph(cudaStream_t s, const cudaGraphNode_t** deps, size_t* num_deps) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  // Edge data is asked for so that programmatic edges (cuBLASLt may add them) do not make the
  // query fail as lossy; the new node takes plain edges.
  const cudaGraphEdgeData* edges = nullptr;
  TG_CUDA(cudaStreamGetCaptureInfo(s, &status, nullptr, &graph, deps, &edges, num_deps));
  if (status != cudaStreamCaptureStatusActive)
    throw Error("[cuda] graph capture: the stream is not capturing (status " +
                std::to_string(static_cast<int>(status)) + ")");
  return graph;
}

}  // namespace

namespace {
// Device -> bytes held by graph memory. Never destroyed: an executable released while the
// process exits (a Python interpreter's teardown) still counts its chunks down.
// Also the most tgraph held at once on each device: its pool's allocations plus graph memory,
// sampled whenever either grows (note_device_usage), so the peak is of the sum at one moment.
struct GraphBytes {
  std::mutex mu;
  std::map<int, size_t> bytes;
  std::map<int, size_t> pool;  // the pool's bytes in use at the last sample
  std::map<int, size_t> peak;
};
GraphBytes& graph_bytes() {
  static auto* b = new GraphBytes;
  return *b;
}
// pool_in_use: the pool's bytes in use now, sampled when graph memory grows. The last
// allocation's sample is stale by then (the pool may have freed most of it since): a capture
// after a large uncaptured run was counted on top of that run's freed activations, and
// tgraph_train's ResNet-50 showed a 21.5 GiB peak where 13.7 GiB were ever in use at once.
void count_graph_bytes(int device, size_t add, size_t sub, size_t pool_in_use = 0) {
  GraphBytes& b = graph_bytes();
  std::lock_guard<std::mutex> lock(b.mu);
  b.bytes[device] = b.bytes[device] + add - sub;
  if (add) b.pool[device] = pool_in_use;
  b.peak[device] = std::max(b.peak[device], b.bytes[device] + b.pool[device]);
}
}  // namespace

void note_device_usage(int device, size_t pool_in_use) {
  GraphBytes& b = graph_bytes();
  std::lock_guard<std::mutex> lock(b.mu);
  b.pool[device] = pool_in_use;
  b.peak[device] = std::max(b.peak[device], b.bytes[device] + pool_in_use);
}

size_t device_peak_bytes(int device) {
  GraphBytes& b = graph_bytes();
  std::lock_guard<std::mutex> lock(b.mu);
  return b.peak[device];
}

void reset_device_peak(int device, size_t pool_in_use) {
  GraphBytes& b = graph_bytes();
  std::lock_guard<std::mutex> lock(b.mu);
  b.pool[device] = pool_in_use;
  b.peak[device] = b.bytes[device] + pool_in_use;
}

size_t graph_memory_bytes(int device) {
  GraphBytes& b = graph_bytes();
  std::lock_guard<std::mutex> lock(b.mu);
  return b.bytes[device];
}

// Released pieces of a GraphMemory: address -> (bytes, chunk index). Neighbours of one chunk
// merge; pieces of different chunks never do (each piece keeps only its own chunk alive).
struct GraphMemory::FreeList {
  std::mutex mu;
  std::map<std::byte*, std::pair<size_t, size_t>> pieces;
  size_t live = 0, live_peak = 0;  // bytes of the pieces handed out, now and at most

  void taken(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    live += n;
    live_peak = std::max(live_peak, live);
  }
  // A planned piece comes back (its bytes stay the plan's).
  void returned(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    live -= n;
  }
  // `piece`: one handed out comes back (else a chunk's unused end joins the list)
  void give(std::byte* p, size_t n, size_t chunk, bool piece = true) {
    std::lock_guard<std::mutex> lock(mu);
    if (piece) live -= n;
    auto next = pieces.find(p + n);
    if (next != pieces.end() && next->second.second == chunk) {
      n += next->second.first;
      pieces.erase(next);
    }
    auto it = pieces.lower_bound(p);
    if (it != pieces.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second.first == p && prev->second.second == chunk) {
        prev->second.first += n;
        return;
      }
    }
    pieces.emplace(p, std::make_pair(n, chunk));
  }
  // The smallest released piece of at least n bytes, cut to n (its rest stays free).
  std::byte* take(size_t n, size_t& chunk) {
    std::lock_guard<std::mutex> lock(mu);
    auto best = pieces.end();
    for (auto it = pieces.begin(); it != pieces.end(); ++it)
      if (it->second.first >= n && (best == pieces.end() || it->second.first < best->second.first)) best = it;
    if (best == pieces.end()) return nullptr;
    std::byte* p = best->first;
    const auto [size, c] = best->second;
    pieces.erase(best);
    if (size > n) pieces.emplace(p + n, std::make_pair(size - n, c));
    chunk = c;
    return p;
  }
};

struct GraphMemory::Plan {
  std::mutex mu;
  std::vector<size_t> sizes, offsets;
  std::vector<std::byte*> at;         // per take: an address in donated bytes, or null (the chunk)
  std::vector<Donated> donated;       // inputs the caller donated, by index
  std::vector<bool> released;         // ... that the run has let go
  std::byte* base = nullptr;          // the planned chunk (null: every take is in donated bytes)
  size_t next = 0, chunk = 0, served = 0, in_donated = 0, misses = 0;
  std::map<std::byte*, std::byte*> live;  // address -> end of the planned buffers alive
  // Whether [p, p + n) is clear of the planned buffers alive (caller holds mu).
  bool clear(std::byte* p, size_t n) const {
    auto it = live.lower_bound(p);
    if (it != live.end() && it->first < p + n) return false;
    return it == live.begin() || std::prev(it)->second <= p;
  }
  // Whether every donated input under [p, p + n) was let go (caller holds mu).
  bool let_go(std::byte* p, size_t n) const {
    for (size_t k = 0; k < donated.size(); ++k)
      if (!released[k] && shares_bytes(donated[k].lo, donated[k].bytes, p, n)) return false;
    return true;
  }
};

GraphMemory::GraphMemory(DeviceContext& ctx) : ctx_(ctx), free_(std::make_shared<FreeList>()) {}

size_t GraphMemory::new_chunk(size_t chunk, size_t request) {
  void* p = nullptr;
  const int device = ctx_.index();
  cudaError_t e = cudaMalloc(&p, chunk);
  if (e == cudaErrorMemoryAllocation) {  // the pool may hold freed blocks cudaMalloc cannot use
    cudaGetLastError();
    ctx_.release_cached();
    e = cudaMalloc(&p, chunk);
  }
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw Error("[cuda] out of memory on cuda:" + std::to_string(device) + " capturing a CUDA graph: requested " +
                std::to_string(request) + " bytes; tgraph holds " + std::to_string(ctx_.bytes_in_use()) +
                " bytes in its pool and " + std::to_string(graph_memory_bytes(device)) + " in captured graphs");
  }
  cuda_check(e, "cudaMalloc (graph memory)");
  count_graph_bytes(device, chunk, 0, ctx_.bytes_in_use());
  cudaStream_t main = ctx_.stream();
  // Freed once no buffer of the chunk is left: after the runs' stream has finished with it
  // (not while that stream is being captured: a captured run never drops graph memory), on
  // its own device whichever device the releasing thread is on.
  chunks_.emplace_back(static_cast<std::byte*>(p), [main, device, chunk](std::byte* q) {
    int current = -1;
    const bool switched = cudaGetDevice(&current) == cudaSuccess && current != device;
    if (switched) cudaSetDevice(device);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(main, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone)
      cudaStreamSynchronize(main);
    cudaFree(q);
    if (switched) cudaSetDevice(current);
    count_graph_bytes(device, 0, chunk);
  });
  reserved_ += chunk;
  return chunks_.size() - 1;
}

void GraphMemory::plan(std::vector<size_t> sizes, std::vector<size_t> offsets, size_t total) {
  plan(std::move(sizes), std::move(offsets), total, {}, {});
}

void GraphMemory::plan(std::vector<size_t> sizes, std::vector<size_t> offsets, size_t total, std::vector<std::byte*> at,
                       std::vector<Donated> donated) {
  at.resize(sizes.size(), nullptr);
  const bool any_donated = std::any_of(at.begin(), at.end(), [](std::byte* p) { return p != nullptr; });
  if (sizes.empty() || sizes.size() != offsets.size() || (total == 0 && !any_donated)) return;
  auto p = std::make_shared<Plan>();
  for (size_t& n : sizes) n = rounded(n);
  p->sizes = std::move(sizes);
  p->offsets = std::move(offsets);
  p->at = std::move(at);
  p->released.assign(donated.size(), false);
  p->donated = std::move(donated);
  if (total) {
    p->chunk = new_chunk(total, total);
    p->base = chunks_[p->chunk].get();
  }
  plan_ = std::move(p);
}

std::function<void()> GraphMemory::donated_release(size_t k) const {
  std::shared_ptr<Plan> p = plan_;
  return [p, k] {
    if (!p) return;
    std::lock_guard<std::mutex> lock(p->mu);
    if (k < p->released.size()) p->released[k] = true;
  };
}

bool GraphMemory::in_donated(const void* p, size_t n) const {
  if (!plan_) return false;
  std::lock_guard<std::mutex> lock(plan_->mu);
  for (const Donated& d : plan_->donated)
    if (shares_bytes(d.lo, d.bytes, p, std::max<size_t>(n, 1))) return true;
  return false;
}

size_t GraphMemory::planned_takes() const {
  if (!plan_) return 0;
  std::lock_guard<std::mutex> lock(plan_->mu);
  return plan_->served;
}

size_t GraphMemory::donated_takes() const {
  if (!plan_) return 0;
  std::lock_guard<std::mutex> lock(plan_->mu);
  return plan_->in_donated;
}

DeviceBuffer GraphMemory::take(size_t bytes) {
  constexpr size_t kMinChunk = size_t{2} << 20, kMaxChunk = size_t{256} << 20, kMaxMisses = 8;
  const size_t n = rounded(bytes);
  if (plan_) {
    std::shared_ptr<Plan> p = plan_;
    std::unique_lock<std::mutex> lock(p->mu);
    // A take of the planned size or less, where no planned buffer alive is (and, in donated
    // bytes, once the run let go of them): there. One that is not (a library's workspace of
    // another size than the recorded run's) gets a chunk, and the plan goes on with the next take.
    if (p->misses < kMaxMisses && p->next < p->sizes.size() && n <= p->sizes[p->next]) {
      std::byte* donated = p->at[p->next];
      std::byte* at = donated ? donated : p->base + p->offsets[p->next];
      if ((donated || p->base) && p->clear(at, n) && (!donated || p->let_go(at, n))) {
        ++p->next;
        ++p->served;
        p->misses = 0;
        p->live.emplace(at, at + n);
        if (donated) {
          // The caller's bytes: not counted as the graph's, and no chunk to keep alive.
          ++p->in_donated;
          lock.unlock();
          return DeviceBuffer(at, [p, at](std::byte*) {
            std::lock_guard<std::mutex> l(p->mu);
            p->live.erase(at);
          });
        }
        lock.unlock();
        std::shared_ptr<std::byte> chunk = chunks_[p->chunk];
        std::shared_ptr<FreeList> fl = free_;
        fl->taken(n);
        // Its bytes go back to the plan only (never to the free list: a later planned take owns them).
        return DeviceBuffer(at, [fl, chunk, p, at, n](std::byte*) {
          fl->returned(n);
          std::lock_guard<std::mutex> l(p->mu);
          p->live.erase(at);
        });
      }
    }
    if (p->next < p->sizes.size()) ++p->next;
    ++p->misses;  // kMaxMisses in a row: the capture allocates otherwise than the run did
  }
  // The piece's deleter gives its bytes back and keeps its chunk alive until then.
  auto piece = [this, n](std::byte* p, size_t c) {
    std::shared_ptr<std::byte> chunk = chunks_[c];
    std::shared_ptr<FreeList> fl = free_;
    fl->taken(n);
    return DeviceBuffer(p, [fl, chunk, n, c](std::byte* q) { fl->give(q, n, c); });
  };
  size_t reused_chunk = 0;
  if (std::byte* p = free_->take(n, reused_chunk)) return piece(p, reused_chunk);
  if (used_ + n > size_) {  // no chunk to cut from yet (size_ 0), or too little left of it
    if (used_ < size_) free_->give(chunks_[bump_].get() + used_, size_ - used_, bump_, false);
    // Chunks grow with the graph (few cudaMalloc calls for a large one); a tensor larger than
    // that gets a chunk of its own size.
    size_t chunk = std::clamp(reserved_, kMinChunk, kMaxChunk);
    chunk = std::max(chunk, (n + kMinChunk - 1) / kMinChunk * kMinChunk);
    bump_ = new_chunk(chunk, bytes);
    used_ = 0;
    size_ = chunk;
  }
  DeviceBuffer b = piece(chunks_[bump_].get() + used_, bump_);
  used_ += n;
  return b;
}

size_t GraphMemory::live_peak() const {
  std::lock_guard<std::mutex> lock(free_->mu);
  return free_->live_peak;
}

void graph_upload(DeviceContext& ctx, void* dst, const void* src, size_t bytes) {
  cudaStream_t side = stream_at(ctx.index(), 0);
  if (bytes) TG_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, side));
  TG_CUDA(cudaStreamSynchronize(side));
}

cudaStream_t body_stream(int device, int depth) { return stream_at(device, depth); }

cudaGraphConditionalHandle new_cond_handle(cudaStream_t capturing) {
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  cudaGraph_t graph = capturing_graph(capturing, &deps, &n);
  cudaGraphConditionalHandle h = 0;
  TG_CUDA(cudaGraphConditionalHandleCreate(&h, graph, 0, 0));
  return h;
}

std::array<cudaGraph_t, 2> add_cond_node(cudaStream_t capturing, cudaGraphConditionalHandle handle,
                                         cudaGraphConditionalNodeType type, unsigned size) {
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  cudaGraph_t graph = capturing_graph(capturing, &deps, &n);
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = handle;
  p.conditional.type = type;
  p.conditional.size = size;
  cudaGraphNode_t node = nullptr;
  TG_CUDA(cudaGraphAddNode(&node, graph, deps, nullptr, n, &p));
  TG_CUDA(
      cudaStreamUpdateCaptureDependencies(capturing, &node, nullptr, 1, cudaStreamSetCaptureDependencies));
  return {p.conditional.phGraph_out[0], size > 1 ? p.conditional.phGraph_out[1] : nullptr};
}

BodyCapture::BodyCapture(cudaStream_t stream, cudaGraph_t body) : stream_(stream), body_(body) {
  // Relaxed: a kernel first met inside a body may still be loaded (cudaLibraryLoadData).
  TG_CUDA(cudaStreamBeginCaptureToGraph(stream, body, nullptr, nullptr, 0, cudaStreamCaptureModeRelaxed));
  active_ = true;
}

void BodyCapture::end() {
  active_ = false;
  cudaGraph_t g = nullptr;
  TG_CUDA(cudaStreamEndCapture(stream_, &g));
  size_t nodes = 0;
  TG_CUDA(cudaGraphGetNodes(body_, nullptr, &nodes));
  cudaGraphNode_t empty = nullptr;
  if (nodes == 0) TG_CUDA(cudaGraphAddEmptyNode(&empty, body_, nullptr, 0));  // a body with no work
}

BodyCapture::~BodyCapture() {
  if (!active_) return;
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream_, &g);
  cudaGetLastError();
}

}  // namespace tg::detail
