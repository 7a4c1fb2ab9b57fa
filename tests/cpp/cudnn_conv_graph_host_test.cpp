// The host-checkable part of the graph-API convolutions (backends/cuda/cudnn_conv_graph.cpp):
// the engine text a saved executable or the disk cache carries is untrusted, and only the exact
// form is taken (anything else: the heuristics are asked), with no GPU needed.
#ifdef TGRAPH_HAVE_CUDA
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cudnn_conv_graph.h"

using tg::detail::graph_conv_engine_parses;

TEST(CudnnGraphHost, EngineTextsAreTakenOnlyInTheirExactForm) {
  if (!tg::detail::graph_conv_takes(tg::DType::f16, false))
    GTEST_SKIP() << "built without the cuDNN frontend";
  for (const char* ok : {"g 22 -", "g 62 1=3,2=7,4=0,7=1,13=2,18=1", "g 0 3=-1"})
    EXPECT_TRUE(graph_conv_engine_parses(ok)) << ok;
  std::string many = "g 1 ";
  for (int i = 0; i < 65; ++i) many += (i ? "," : "") + std::to_string(i) + "=1";
  for (const std::string& bad :
       {std::string(""), std::string("g"), std::string("g 22"), std::string("x 22 -"), std::string("g -1 -"),
        std::string("g 22x -"), std::string("g 99999999999999999999 -"), std::string("g 1 3=5abc"),
        std::string("g 1 3=5,"), std::string("g 1 =5"), std::string("g 1 3="), std::string("g 1 1=2 extra"),
        std::string("g 1 5000=1"), std::string("g 1 1=99999999999999999999"), many, std::string("1 0 0")})
    EXPECT_FALSE(graph_conv_engine_parses(bad)) << bad;
}
#endif  // TGRAPH_HAVE_CUDA
