// The .npy reader and writer of the tgraph command line.
#ifdef TGRAPH_HAVE_ONNX
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "npy.h"
#include "tgraph/error.h"

namespace {

TEST(Npy, RoundTripsEveryDtypeAndRank) {
  std::string path = testing::TempDir() + "/tgraph_npy_test.npy";
  for (tg::DType dt : {tg::f32, tg::f64, tg::f16, tg::i8, tg::i16, tg::i32, tg::i64, tg::u8, tg::boolean}) {
    for (tg::Shape s : {tg::Shape{}, tg::Shape{5}, tg::Shape{2, 3}, tg::Shape{2, 0, 3}}) {
      tg::TensorData t = tg::TensorData::uniform(s, 0, 3, dt, 7);
      tg::tools::write_npy(path, t);
      tg::TensorData r = tg::tools::read_npy(path);
      EXPECT_EQ(r.dtype(), dt);
      EXPECT_EQ(r.shape(), s);
      EXPECT_EQ(r.to_vector(), t.to_vector());
    }
  }
  std::remove(path.c_str());
}

TEST(Npy, ReadsNumpyFile) {
  // Written by numpy: np.random.seed(0); np.random.randn(3,4,5).astype(np.float32).
  tg::TensorData t = tg::tools::read_npy(std::string(TGRAPH_SOURCE_DIR) + "/tests/conformance/relu_input.npy");
  EXPECT_EQ(t.shape(), tg::Shape({3, 4, 5}));
  EXPECT_EQ(t.dtype(), tg::f32);
  EXPECT_NEAR(t.at(0), 1.7640524, 1e-6);
}

TEST(Npy, UnsignedWideTypesAreReadWidened) {
  std::string path = testing::TempDir() + "/tgraph_u4.npy";
  {
    std::ofstream f(path, std::ios::binary);
    std::string header = "{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }";
    header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
    f.write("\x93NUMPY\x01\x00", 8);
    char len[2] = {static_cast<char>(header.size()), 0};
    f.write(len, 2);
    f << header;
    uint32_t v[2] = {7, 4000000000u};
    f.write(reinterpret_cast<const char*>(v), sizeof v);
  }
  tg::TensorData t = tg::tools::read_npy(path);
  EXPECT_EQ(t.dtype(), tg::i64);
  EXPECT_EQ(t.ptr<int64_t>()[1], 4000000000LL);
  std::remove(path.c_str());
}

TEST(Npy, BadFilesAreClearErrors) {
  std::string path = testing::TempDir() + "/tgraph_bad.npy";
  {
    std::ofstream f(path, std::ios::binary);
    f << "not numpy";
  }
  try {
    tg::tools::read_npy(path);
    FAIL();
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a .npy file"), std::string::npos);
  }
  std::remove(path.c_str());
}

// A .npy with the given header shape and `data` bytes of f32 data.
std::string npy_with_shape(const std::string& name, const std::string& shape, size_t data) {
  std::string path = testing::TempDir() + "/" + name;
  std::ofstream f(path, std::ios::binary);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  f.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  f.write(len, 2);
  f << header;
  f << std::string(data, '\0');
  return path;
}

std::string npy_error(const std::string& shape, size_t data) {
  const std::string path = npy_with_shape("tgraph_hostile.npy", shape, data);
  try {
    tg::tools::read_npy(path);
  } catch (const tg::Error& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "";
}

// Headers that claim shapes the data cannot hold: one clear tg::Error each, before anything is
// allocated (no std::length_error, no std::bad_alloc, no wrapped element count).
TEST(Npy, HostileShapesAreRefusedBeforeAllocating) {
  EXPECT_NE(npy_error("4611686018427387905, 4, 1", 16).find("more elements than fit in 64 bits"), std::string::npos);
  EXPECT_NE(npy_error("1000000, 1000000", 16).find("data is shorter than the shape [1000000,1000000] needs"),
            std::string::npos);
  EXPECT_NE(npy_error("-5, 3", 64).find("not a size: '-5'"), std::string::npos);
  EXPECT_NE(npy_error("2, x", 64).find("not a size: 'x'"), std::string::npos);
  EXPECT_NE(npy_error("99999999999999999999999", 64).find("not a size"), std::string::npos);
  EXPECT_NE(npy_error("3,", 8).find("data is shorter"), std::string::npos);
  EXPECT_EQ(npy_error("2, 2", 16), "");  // and a good one still reads
}

}  // namespace
#endif
