// The extension module tgraph._tgraph; the package tgraph (python/tgraph) re-exports it and adds
// the Python conveniences (operators on tensors, keyword forms of compile and run).
#include "py_tensor.h"

NB_MODULE(_tgraph, m) {
  m.doc() = "tgraph: build a graph of tensor operations, compile it once, run it many times.";
  tgpy::bind_types(m);
  tgpy::bind_data(m);
  tgpy::bind_graph(m);
  tgpy::bind_executable(m);
  tgpy::bind_training(m);
}
