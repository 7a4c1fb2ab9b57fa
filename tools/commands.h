#pragma once
// The ONNX subcommands of the tgraph command line.
#include <cstdint>
#include <string>
#include <vector>

#include "tgraph/device.h"

namespace tg::tools {

/// "cpu", "cuda" or "cuda:N"; throws tg::Error otherwise.
Device parse_device(const std::string& s);
/// Option `opt` of command `cmd` as an integer >= `min`; "[cmd] opt takes an integer >= min,
/// got 'v'" otherwise (never std::stoi's bare exception).
int64_t parse_integer(const std::string& cmd, const std::string& opt, const std::string& v, int64_t min);
/// The same for a number of seconds > 0.
double parse_seconds(const std::string& cmd, const std::string& opt, const std::string& v);
/// True when `path` names a saved executable (.tgx) rather than an ONNX model.
bool is_tgx(const std::string& path);
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
