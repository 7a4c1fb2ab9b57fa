#pragma once
// Between cuDNN's attention plans (cudnn_attention.cpp) and the tiered path that runs tgraph's
// own attention kernel while a cold shape's plan is built on a thread (attention_tiers.cpp):
// what each asks of the other. Internal to the CUDA backend; cuda_ops.h has the public side.
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cudnn_util.h"

namespace tg::detail {

// --- the plans (cudnn_attention.cpp) ---

/// [b, h, s, d] of q, k and v and the bias dims of call c as cuDNN's kernel sees them; false
/// when the call is not of the kind it takes (dtypes, ranks, head dims, bias form).
bool attention_geometry(const AttentionCall& c, std::vector<int64_t>& q, std::vector<int64_t>& k,
                        std::vector<int64_t>& v, std::vector<int64_t>& mask);
/// The process's key of c's plan on `device` (the plan cache's, and the tiered path's).
std::string attention_plan_key(int device, const AttentionCall& c);
/// Whether c's calls bind shared kernels (the TGRAPH_ATTENTION_SHARED_KERNELS experiment).
bool attention_kernels_shared(const AttentionCall& c);
/// True when c's plan is built (or refused), or being built in turn, in this process.
bool attention_plan_made(int device, const AttentionCall& c);
/// True when a plan for c is saved where a build reads it first (an executable's file, the disk
/// cache): reading one back takes 3 ms.
bool attention_plan_saved(int device, const AttentionCall& c);
/// The key c's plan is filed under among an executable's library choices, and the plan the disk
/// cache holds for c (empty when none).
std::string attention_saved_plan_key(int device, const AttentionCall& c);
std::string attention_plan_from_disk(int device, const AttentionCall& c);

/// A plan built on a handle other than the device's: serialised among the saved plans (so the
/// device's handle reads it back, 3 ms) when cuDNN took the call; marked refused in the process
/// when cuDNN refused it (not for a CUDA error); neither when it would not serialise.
struct OffThreadPlan {
  std::string blob;      // the plan, serialised (empty: not handed over)
  bool refused = false;  // cuDNN refused the call
};
OffThreadPlan build_attention_plan_on(int device, const AttentionCall& c, CudnnDevice& on);
/// Reads back or builds c's plan on the device's handle, as a run does.
void make_attention_plan(int device, const AttentionCall& c);

// --- the tiered path (attention_tiers.cpp) ---

/// Runs call c with tgraph's own kernel; false when the kernel does not take it.
bool own_attention(const AttentionCall& c, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                   cudaStream_t stream);
/// True when tgraph's kernel, not the device's cuDNN handle, makes c's first call on `device`
/// (TGRAPH_OWN_ATTENTION, or a plan deferred, or one that would be): no warm-up call for it.
bool attention_starts_on_own_kernel(int device, const AttentionCall& c);
/// A run's call c: true when tgraph's kernel ran it (TGRAPH_OWN_ATTENTION, or standing in while
/// the plan is built); false once c's plan can be asked for (a deferred build waited for, or
/// claimed and made here).
bool attention_stand_in(const AttentionCall& c, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                        cudaStream_t stream, int device);

}  // namespace tg::detail
