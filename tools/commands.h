#pragma once
// The ONNX subcommands of the tgraph command line.
#include <string>
#include <vector>

#include "tgraph/device.h"

namespace tg::tools {

/// "cpu", "cuda" or "cuda:N"; throws tg::Error otherwise.
Device parse_device(const std::string& s);
/// Each takes the arguments after the command name and returns the exit code.
int cmd_info(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_dot(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_compile(const std::vector<std::string>& args);
int cmd_conformance(const std::vector<std::string>& args);
/// Runs one node test directory and prints PASS, FAIL: reason or SKIP: reason.
int conformance_one(const std::string& dir, const std::string& device);
/// The --help text of a command, or nullptr for an unknown one.
const char* command_help(const std::string& cmd);

}  // namespace tg::tools
