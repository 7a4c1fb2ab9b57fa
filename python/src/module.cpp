// The extension module tgraph._tgraph; the package tgraph (python/tgraph) re-exports it and adds
// the Python conveniences (operators on tensors, keyword forms of compile and run).
#include "py_tensor.h"

namespace nb = nanobind;

NB_MODULE(_tgraph, m) {
  m.doc() = "tgraph: build a graph of tensor operations, compile it once, run it many times.";
  // Objects still referenced at interpreter exit (descriptor defaults, tensors held by other
  // modules' caches such as TorchDynamo's) are not leaks worth a report on every exit.
  nb::set_leak_warnings(false);
  tgpy::bind_types(m);
  tgpy::bind_data(m);
  tgpy::bind_graph(m);
  tgpy::bind_executable(m);
  tgpy::bind_training(m);
  tgpy::bind_distributed(m);
}
