#pragma once
// Helpers shared by the C++ tests.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>

#include "tgraph/error.h"

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
