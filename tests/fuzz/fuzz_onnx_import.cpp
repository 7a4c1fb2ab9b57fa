// libFuzzer target: arbitrary bytes as an ONNX model must import or fail with tg::Error.
#include <cstddef>
#include <cstdint>

#include "tgraph/error.h"
#include "tgraph/onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tg::import_onnx_bytes(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const tg::Error&) {
  }
  return 0;
}
