#pragma once
// tgraph: build a graph of tensor operations, compile it once, run it many times.
#include "tgraph/descriptors.h"
#include "tgraph/device.h"
#include "tgraph/device_tensor.h"
#include "tgraph/distributed.h"
#include "tgraph/dtype.h"
#include "tgraph/error.h"
#include "tgraph/executable.h"
#include "tgraph/graph.h"
#include "tgraph/memory.h"
#include "tgraph/shape.h"
#include "tgraph/tensor.h"
#include "tgraph/tensor_data.h"
