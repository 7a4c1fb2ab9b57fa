// libFuzzer target: arbitrary bytes as a .npy file must read or fail with tg::Error -- headers
// claiming any shape (overflowing, negative, huge against the data) included.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "npy.h"
#include "tgraph/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tgraph_fuzz_npy_" + std::to_string(::getpid()) + ".npy";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    tg::TensorData t = tg::tools::read_npy(path);
    (void)t.nbytes();
  } catch (const tg::Error&) {
  }
  return 0;
}
