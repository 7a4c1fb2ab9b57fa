#pragma once
// The cuDNN convolution algorithms this process chose (cudnn_conv.cpp asks cuDNN; this is what
// it remembers): by problem, by family (the problem without its batch size, so a new batch
// size reuses the nearest one's choice), the algorithms whose kernels have run (loaded), and
// the problems a reused choice was declined for. Also the text form a choice has in an
// executable's file and in the disk cache.
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace tg::detail::conv_choices {

/// The most workspace a convolution may take (1 GiB).
constexpr size_t kMaxWorkspace = size_t(1) << 30;

/// The algorithm chosen for one configuration; ok false when cuDNN does not cover it.
struct Choice {
  bool ok = false;
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

/// The process's choices. Never destroyed: warm-up threads asking put-off questions
/// (ProvisionalChoices) may still use them while the program exits.
struct Choices {
  std::mutex mu;
  std::map<std::string, Choice> by_problem;                    // by device and problem
  std::map<std::string, std::map<int64_t, Choice>> by_family;  // by device and problem without
                                                               // the batch, then batch
  std::set<std::string> ran;       // the algorithms (with their math) that ran, by family: kernels loaded
  std::set<std::string> no_reuse;  // problems a reused choice (disk, family) was declined for
};
Choices& choices();

// The store's parts; every use is under cache_mutex().
inline std::mutex& cache_mutex() { return choices().mu; }
inline std::map<std::string, Choice>& cache() { return choices().by_problem; }
inline std::map<std::string, std::map<int64_t, Choice>>& families() { return choices().by_family; }
inline std::set<std::string>& ran() { return choices().ran; }
/// The key of `ran` for algorithm c of `family`.
std::string ran_key(const std::string& family, const Choice& c);

/// "<algo> <math> <workspace>": a choice as an executable's file and the disk cache hold it.
std::string choice_text(const Choice& c);
/// The choice in `text`; not ok when malformed (the heuristics are asked instead).
Choice parse_choice(const std::string& text);

/// Files a choice under `key` ("<device>|<problem>|n<batch>") and in its family, so a problem
/// met at a new batch size reuses it as one chosen in this process would be. Under cache_mutex.
void adopt(const std::string& key, const Choice& choice);

/// The key of a choice on disk: the saved one (library_plans.h), Find's apart from the
/// heuristics' (a measured choice is not taken for a guess, nor the other way).
std::string disk_key(const std::string& saved);

/// The choice this process already has for a problem: its own (`exact`, declined ones too), or
/// to reuse (its workspace asked again: another GPU of the same architecture may differ) the one
/// an earlier process chose on this machine (the disk cache), else the one made at the nearest
/// batch size of its family within a factor of 4, unless TGRAPH_CUDNN_FIND or
/// TGRAPH_CUDNN_PER_BATCH asks every batch, or a reused choice was declined for this problem.
/// Under cache_mutex.
Choice known_choice(const std::string& key, const std::string& saved, const std::string& family, int64_t batch,
                    bool& exact);

/// A first run's provisional choice for a batch size the family has none near (ProvisionalChoices
/// installed): the choice at the nearest batch size of any ratio whose kernels are loaded, or
/// none (then the heuristics are asked now). Never under TGRAPH_CUDNN_FIND or
/// TGRAPH_CUDNN_PER_BATCH. Under cache_mutex.
Choice provisional_choice(const std::string& family, int64_t batch);

}  // namespace tg::detail::conv_choices
