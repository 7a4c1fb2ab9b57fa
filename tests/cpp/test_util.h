#pragma once
// Helpers shared by the C++ tests.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/env.h"
#include "tgraph/descriptors.h"
#include "tgraph/error.h"

/// Debugging switches (docs/switches.md) for the calling thread while in scope, in place of
/// setenv / unsetenv: nothing process-wide changes, and a failed assertion cannot leave a switch
/// set for the tests after it. The switches read once per process are not seen.
class WithSwitches {
 public:
  explicit WithSwitches(std::map<std::string, std::string> s) : switches_(std::move(s)), scope_(switches_) {}
  WithSwitches(std::initializer_list<std::pair<const std::string, std::string>> s)
      : WithSwitches(std::map<std::string, std::string>(s)) {}
  WithSwitches(const WithSwitches&) = delete;
  WithSwitches& operator=(const WithSwitches&) = delete;

 private:
  std::map<std::string, std::string> switches_;
  tg::detail::SwitchScope scope_;
};

/// Expects `stmt` to throw tg::Error whose message contains every fragment given.
#define EXPECT_TG_ERROR(stmt, ...)                                              \
  do {                                                                          \
    try {                                                                       \
      stmt;                                                                     \
      ADD_FAILURE() << "expected tg::Error from " #stmt;                        \
    } catch (const tg::Error& e) {                                              \
      for (const char* frag : {__VA_ARGS__})                                    \
        EXPECT_NE(std::string(e.what()).find(frag), std::string::npos)          \
            << "message '" << e.what() << "' lacks '" << frag << "'";           \
    }                                                                           \
  } while (0)

/// The float with bit pattern b, and a float's bit pattern (ulp distances between floats of one sign).
inline float float_from_bits(uint32_t b) { return std::bit_cast<float>(b); }
inline int32_t float_bits(float f) { return std::bit_cast<int32_t>(f); }

/// A strided slice's description: begin, end and strides per sliced dim, and the masks.
inline tg::SliceDesc slice_desc(std::vector<int64_t> begin, std::vector<int64_t> end, std::vector<int64_t> strides,
                                int64_t begin_mask = 0, int64_t end_mask = 0, int64_t squeeze_mask = 0) {
  tg::SliceDesc d;
  d.begin = std::move(begin);
  d.end = std::move(end);
  d.strides = std::move(strides);
  d.begin_mask = begin_mask;
  d.end_mask = end_mask;
  d.squeeze_mask = squeeze_mask;
  return d;
}
