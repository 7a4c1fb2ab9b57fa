// libFuzzer target: arbitrary bytes as the payload of a .tgx executable file (past the
// checksum, which random bytes would never pass) must load or fail with tg::Error, read as
// version 3 (device code last), version 4 (library plans after it) and version 5 (switches and
// a dynamic executable's source graph after those).
#include <cstddef>
#include <cstdint>

#include "runtime/serialize.h"
#include "tgraph/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int64_t version : {3, 4, 5}) {
    try {
      tg::detail::deserialize_payload(reinterpret_cast<const char*>(data), size, version);
    } catch (const tg::Error&) {
    }
  }
  return 0;
}
