#pragma once
// Weights that are graph constants, reordered into a oneDNN primitive's preferred layout once
// and kept (convolutions' blocked filters, matmul's packed B), instead of per call: a
// ResNet-50 in NCHW had reordered its 100 MB of filters on every run, and BERT's brgemm
// matmuls repacked every weight matrix (2.3x ONNX Runtime's time on a 128x768x3072 product).
#include <vector>

#include <dnnl.hpp>

#include "ir/graph_impl.h"
#include "tgraph/tensor_data.h"

namespace tg::detail::fast {

/// True when input i of n is the data of the constant node that produces it.
bool constant_input(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, size_t i);

/// Constant `w`, stored as `user`, in layout `packed`: reordered on stream s at first use and
/// kept, keyed by (w's bytes, user, packed), so every primitive that wants those bytes in that
/// layout shares one copy — the entry holds a reference to the bytes, so their address is not
/// reused while cached, and constants are never written. nullptr past the budget (2 GiB of
/// packed copies): the caller reorders per call as before.
const dnnl::memory* packed_weights(const TensorData& w, const dnnl::memory::desc& user,
                                   const dnnl::memory::desc& packed, dnnl::stream& s);

/// Bytes of packed copies kept (tests read it).
size_t packed_weights_bytes();

}  // namespace tg::detail::fast
