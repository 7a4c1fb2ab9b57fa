#pragma once
// Device copies of constants shared between executables (shared_constants.cpp).
#include <functional>

#include "backends/cuda/device_context.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

/// The device copy of constant `host` on `device`: the one another executable made of the same
/// host bytes while it is alive, else `upload()`'s, kept for the next. The per-size copies of a
/// dynamic executable hold their weights in the same host storage (their graphs are copies;
/// folded weights come from passes/fold_memo.h), so they share one device copy instead of
/// uploading a model's weights again at each new size. Small constants are not shared.
DeviceBuffer shared_device_constant(int device, const TensorData& host, const std::function<DeviceBuffer()>& upload);
/// Device bytes of constants handed out shared (a copy reused by a second executable), in
/// this process (tests read it).
long long shared_constant_bytes_reused();

}  // namespace tg::detail
