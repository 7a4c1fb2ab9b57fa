// CompileOptions::switches (docs/switches.md): a switch set for one executable is seen by its
// compile (here TGRAPH_DUMP, whose files show it) before the environment's value, and not by
// other executables; an unknown name is an error naming the ones it may be.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "tgraph/tgraph.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tgraph_switches_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

Executable compile_with(const std::map<std::string, std::string>& switches) {
  Graph g;
  Tensor x = g.placeholder({4}, f32);
  CompileOptions o{.device = Device::cpu()};
  o.switches = switches;
  return g.compile({{x, x.type()}}, {g.exp(g.add(x, x))}, {}, o);
}

}  // namespace

TEST(Switches, SetForOneExecutableBeforeTheEnvironment) {
  const fs::path mine = fresh_dir("mine"), env = fresh_dir("env");
  setenv("TGRAPH_DUMP", env.c_str(), 1);
  Executable e = compile_with({{"TGRAPH_DUMP", mine.string()}});
  unsetenv("TGRAPH_DUMP");
  EXPECT_TRUE(fs::exists(mine / "00-input.txt"));
  EXPECT_FALSE(fs::exists(env));  // the option won over the environment
  const TensorData y = e.run({TensorData::from_floats({4}, {0, 0.5f, 1, -1})})[0];
  EXPECT_NEAR(y.at(2), std::exp(2.0), 1e-5);
  // Another executable compiled after it sees nothing of it.
  fs::remove_all(mine);
  compile_with({});
  EXPECT_FALSE(fs::exists(mine));
  fs::remove_all(env);
}

TEST(Switches, AnUnknownNameIsAnErrorNamingTheKnownOnes) {
  try {
    compile_with({{"TGRAPH_NO_FUSIN", "1"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("TGRAPH_NO_FUSIN"), std::string::npos) << m;
    EXPECT_NE(m.find("TGRAPH_NO_FUSION"), std::string::npos) << m;
  }
  EXPECT_THROW(compile_with({{"TGRAPH_DEVICE", "cpu"}}), Error);  // process-wide: not per executable
}
