#pragma once
// Weight-sized folds (a cast or transpose of a weight) remembered by the buffer they come
// from: an executable with dynamic sizes compiles a copy of its source graph for each size it
// meets (runtime/specialize.cpp), whose constants share their buffers with the source's, and
// each copy cast and transposed every weight again (57 ms a copy for BERT-base f16 on the H200)
// into buffers of its own. A result is keyed by the source buffer it was folded from and the
// chain of folds (transpose, then cast), so a copy whose intermediate was already freed (DCE
// drops dead constants' values) still finds the final result. Held weakly: an entry serves
// while its source buffer and its result are both alive somewhere; the copies then share the
// folded weights too. Used by constant_folding.cpp.
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

/// While alive on a thread, the costly folds a compile makes or finds in the memo (a batch
/// norm folded into its filters: fold_batch_norm.cpp notes them) are also held here. The memo
/// holds results weakly, so a fold a compile leaves dead (the folded f32 filters, cast and
/// transposed after) is freed and the next per-size copy would fold it again (ResNet-50's batch
/// norms: 26-75 ms a copy on 2 cores); a dynamic executable takes what its compile collected
/// into its source (runtime/specialize.cpp) and keeps it as long as it can compile copies.
/// Cheap folds (a weight's cast or transpose) are not held: done again per copy, their final
/// results shared through the memo anyway. Nests: only the outermost collects.
class FoldKeep {
 public:
  FoldKeep();
  ~FoldKeep();
  FoldKeep(const FoldKeep&) = delete;
  FoldKeep& operator=(const FoldKeep&) = delete;
  /// Adds a buffer to this thread's collection, if one is active (a fold made, or found).
  static void note(const std::shared_ptr<std::byte>& buffer);
  /// The buffers collected so far (this one's, empty when it is not the outermost).
  std::vector<std::shared_ptr<std::byte>> take();

 private:
  bool outermost_;
  std::vector<std::shared_ptr<std::byte>> held_;
};

class FoldMemo {
 public:
  /// The process's memo.
  static FoldMemo& get();
  /// One fold's description: the op, its attributes, the input and output types.
  static std::string step(const GraphImpl& g, const Node& n, const TensorData& x);
  /// The result of `step` applied to x (through the folds x itself came from), if remembered.
  bool find(const TensorData& x, const std::string& step, TensorData& out);
  /// Remembers `out` as the result of `step` applied to x.
  void add(const TensorData& x, const std::string& step, const TensorData& out);

 private:
  struct Entry {
    std::weak_ptr<std::byte> root, out;
    TensorType type;
  };
  struct Origin {
    std::weak_ptr<std::byte> self, root;
    const void* root_ptr = nullptr;
    std::string chain;
  };
  // Where buffer x was folded from (itself, when it was not, or its record is stale).
  Origin origin(const TensorData& x) const;

  std::mutex mu_;
  std::map<std::pair<const void*, std::string>, Entry> entries_;
  std::map<const void*, Origin> origins_;
  size_t live_ = 64;
};

}  // namespace tg::detail
