#pragma once
// Helpers shared by the C++ tests.
#include <gtest/gtest.h>

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
