// `tgraph conformance DIR`: ONNX backend node tests. Each test runs in a child process (forked
// from this one, which has touched nothing of tgraph's yet: no threads, no CUDA context), so a
// crash or a hang fails one test only. `tgraph __conformance-one DIR DEVICE` runs one test the
// same way from the command line. Forking without exec spares each test loading the CUDA
// libraries again: it had been most of a run's time (0.1-0.2 s of system time a test).
#include "commands.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "tgraph/error.h"
#include "tgraph/executable.h"
#include "tgraph/onnx.h"

namespace tg::tools {

namespace {

std::vector<std::string> list_dir(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> r;
  DIR* d = opendir(dir.c_str());
  if (!d) return r;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(prefix, 0) == 0) r.push_back(n);
  }
  closedir(d);
  std::sort(r.begin(), r.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // input_2 before input_10
  });
  return r;
}

// ONNX 1.12's test data stores bfloat16 tensors as uint16 bit patterns (read as i32 here).
TensorData bf16_from_bits(const TensorData& t) {
  TensorData r(t.shape(), DType::bf16);
  for (int64_t i = 0; i < t.num_elements(); ++i) r.ptr<uint16_t>()[i] = static_cast<uint16_t>(t.ptr<int32_t>()[i]);
  return r;
}

std::string compare(const TensorData& got, const TensorData& want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype());
  if (!(got.shape() == want.shape())) return "shape " + got.shape().str() + ", expected " + want.shape().str();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double g = got.at(i), w = want.at(i);
    bool ok = (std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= 1e-7 + 1e-3 * std::abs(w);
    if (!ok && bad++ == 0) first = i;
  }
  if (!bad) return "";
  std::ostringstream s;
  s << bad << " of " << want.num_elements() << " values differ (first at " << first << ": " << got.at(first)
    << " vs " << want.at(first) << ")";
  return s.str();
}

// The kind of value a declared input or output holds, from inspect_onnx's type string.
OnnxValueForm::Kind declared_kind(const std::string& name, const std::string& type) {
  if (type == "sequence") return OnnxValueForm::Kind::sequence;
  if (type == "optional") return OnnxValueForm::Kind::optional;
  if (type.find('[') == std::string::npos)
    throw Error("'" + name + "' has type " + type + "; only tensors, sequences and optionals are supported");
  return OnnxValueForm::Kind::tensor;
}

}  // namespace

// Runs one test and prints PASS, FAIL: reason or SKIP: reason. Sequence and optional inputs
// are fed as the tensors they hold (OnnxImportOptions::input_forms); such outputs are compared
// by their form, then tensor by tensor.
int conformance_one(const std::string& dir, const std::string& device) {
  std::string result = "PASS";
  try {
    OnnxModelInfo info = inspect_onnx(dir + "/model.onnx");
    std::string data = dir + "/test_data_set_0";
    std::vector<TensorData> inputs, outputs;
    std::vector<OnnxValueForm> output_forms;
    OnnxImportOptions opt;
    std::vector<DType> declared;  // the declared dtype of each tensor input, for bf16 test data
    int64_t elements = 0;
    // Data the runner cannot read (strings): the importer's error names the op that needs it.
    for (const auto* list : {&info.inputs, &info.outputs})
      for (const auto& [name, type] : *list)
        if (type.find("onnx-type-8") != std::string::npos) import_onnx(dir + "/model.onnx");
    const auto input_files = list_dir(data, "input_");
    for (size_t i = 0; i < input_files.size(); ++i) {
      const auto kind = i < info.inputs.size() ? declared_kind(info.inputs[i].first, info.inputs[i].second)
                                               : OnnxValueForm::Kind::tensor;
      const size_t first = inputs.size();
      OnnxValueForm form = read_onnx_value(data + "/" + input_files[i], kind, inputs);
      if (kind != OnnxValueForm::Kind::tensor) opt.input_forms[info.inputs[i].first] = form;
      for (size_t k = first; k < inputs.size(); ++k) {
        elements += inputs[k].num_elements();
        declared.push_back(kind == OnnxValueForm::Kind::tensor ? info.input_types[i].dtype
                                                               : inputs[k].dtype());
      }
    }
    const auto output_files = list_dir(data, "output_");
    for (size_t i = 0; i < output_files.size(); ++i) {
      const auto kind = i < info.outputs.size() ? declared_kind(info.outputs[i].first, info.outputs[i].second)
                                                : OnnxValueForm::Kind::tensor;
      output_forms.push_back(read_onnx_value(data + "/" + output_files[i], kind, outputs));
    }
    if (elements > (int64_t{1} << 24)) {
      std::printf("SKIP: inputs hold %lld elements (limit 2^24)\n", static_cast<long long>(elements));
      return 0;
    }
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].dtype() == DType::i32 && declared[i] == DType::bf16)
        inputs[i] = bf16_from_bits(inputs[i]);
    // The test's inputs fix the shapes of the graph's inputs (symbolic dims included).
    for (const auto& t : inputs) opt.input_shapes_in_order.push_back(t.shape());
    OnnxModel m;
    try {
      m = import_onnx(dir + "/model.onnx", opt);
    } catch (const Error& e) {
      // Node tests feed shape operands as graph inputs; their values are known here.
      if (std::string(e.what()).find("must be known at import time") == std::string::npos) throw;
      opt.input_values_in_order = inputs;
      m = import_onnx(dir + "/model.onnx", opt);
    }
    if (m.inputs.size() != inputs.size())
      throw Error("the model has " + std::to_string(m.inputs.size()) + " inputs, the test gives " +
                  std::to_string(inputs.size()));
    for (size_t i = 0; i < output_forms.size() && i < m.output_forms.size(); ++i)
      if (!(m.output_forms[i].second == output_forms[i]))
        throw Error("output " + std::to_string(i) + " ('" + m.output_forms[i].first + "') is a " +
                    m.output_forms[i].second.str() + ", expected a " + output_forms[i].str());
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].dtype() == DType::i32 && m.outputs.size() > i && m.outputs[i].dtype() == DType::bf16)
        outputs[i] = bf16_from_bits(outputs[i]);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].dtype() != m.input_types[i].dtype)
        throw Error("input " + std::to_string(i) + " is " + dtype_name(inputs[i].dtype()) + ", the model declares " +
                    dtype_name(m.input_types[i].dtype));
    CompileOptions co;
    co.device = parse_device(device);
    Executable exe = m.compile(co);
    std::vector<TensorData> got = exe.run(inputs);
    if (got.size() != outputs.size())
      throw Error(std::to_string(got.size()) + " outputs, expected " + std::to_string(outputs.size()));
    for (size_t i = 0; i < got.size(); ++i) {
      std::string why = compare(got[i], outputs[i]);
      if (!why.empty()) throw Error("output " + std::to_string(i) + " ('" + m.output_names[i] + "'): " + why);
    }
  } catch (const std::exception& e) {
    result = std::string("FAIL: ") + e.what();
  }
  std::printf("%s\n", result.c_str());
  return 0;
}

namespace {

struct Job {
  std::string name;
  pid_t pid = -1;
  int fd = -1;
  std::string out;
  std::chrono::steady_clock::time_point start;
};

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::map<std::string, std::string> read_expected(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("[conformance] cannot open " + path);
  std::map<std::string, std::string> r;
  std::string line;
  while (std::getline(f, line)) {
    size_t hash = line.find('#');
    std::string name = trim(line.substr(0, hash));
    if (!name.empty()) r[name] = hash == std::string::npos ? "" : trim(line.substr(hash + 1));
  }
  return r;
}

Job spawn(const std::string& self, const std::string& dir, const std::string& name, const std::string& device) {
  int p[2];
  if (pipe(p) != 0) throw Error("[conformance] pipe failed");
  Job j;
  j.name = name;
  j.start = std::chrono::steady_clock::now();
  std::fflush(nullptr);  // nothing of ours buffered may reach the child's pipe
  j.pid = fork();
  if (j.pid < 0) throw Error("[conformance] fork failed");
  if (j.pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    close(p[0]);
    close(p[1]);
    (void)self;
    int rc = 1;
    try {
      rc = conformance_one(dir + "/" + name, device);
    } catch (const std::exception& e) {
      std::printf("FAIL: %s\n", e.what());
    }
    std::fflush(nullptr);
    _exit(rc);
  }
  close(p[1]);
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  j.fd = p[0];
  return j;
}

void drain(Job& j) {
  char buf[4096];
  ssize_t n;
  while ((n = read(j.fd, buf, sizeof buf)) > 0) j.out.append(buf, static_cast<size_t>(n));
}

}  // namespace

int cmd_conformance(const std::vector<std::string>& args) {
  std::string dir, device = "cpu", expected, write_expected, filter;
  double timeout = 60;
  int jobs = 1;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error("[conformance] " + a + " needs a value");
      return args[++i];
    };
    if (a == "--device") device = next();
    else if (a == "--expected") expected = next();
    else if (a == "--write-expected") write_expected = next();
    else if (a == "--timeout") timeout = parse_seconds("conformance", a, next());
    else if (a == "-j" || a == "--jobs") jobs = static_cast<int>(parse_integer("conformance", a, next(), 1));
    else if (a == "--filter") filter = next();
    else if (!a.empty() && a[0] == '-') throw Error("[conformance] unknown option " + a);
    else dir = a;
  }
  if (dir.empty()) throw Error("[conformance] give the directory of the node tests");
  {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      throw Error("[conformance] " + dir + (std::filesystem::exists(dir, ec) ? " is not a directory" : ": no such directory"));
  }
  parse_device(device);
  std::vector<std::string> tests;
  for (const auto& n : list_dir(dir, "test_"))
    if (filter.empty() || n.find(filter) != std::string::npos) tests.push_back(n);
  std::sort(tests.begin(), tests.end());
  if (tests.empty()) throw Error("[conformance] no test_* directories in " + dir);
  std::map<std::string, std::string> exp;
  if (!expected.empty()) exp = read_expected(expected);

  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) throw Error("[conformance] cannot find the tgraph executable");
  self[len] = '\0';

  auto t0 = std::chrono::steady_clock::now();
  int passed = 0, failed = 0, skipped = 0, unexpected = 0;
  std::map<std::string, std::string> failures;
  std::vector<Job> running;
  size_t next = 0;
  auto finish = [&](Job& j, const std::string& forced) {
    std::string line = forced;
    if (line.empty()) {
      std::istringstream s(j.out);
      std::string l;
      while (std::getline(s, l))
        if (l.rfind("PASS", 0) == 0 || l.rfind("FAIL", 0) == 0 || l.rfind("SKIP", 0) == 0) line = l;
      if (line.empty()) line = "FAIL: crashed: " + trim(j.out).substr(0, 200);
    }
    bool listed = exp.count(j.name) > 0;
    if (line.rfind("PASS", 0) == 0) {
      ++passed;
      if (listed) {
        ++unexpected;
        std::printf("UNEXPECTED PASS %s (listed in %s)\n", j.name.c_str(), expected.c_str());
      }
    } else {
      std::string reason = trim(line.substr(5));
      bool skip = line.rfind("SKIP", 0) == 0;
      skip ? ++skipped : ++failed;
      failures[j.name] = (skip ? "skipped: " : "") + reason;
      if (!expected.empty() && !listed) {
        ++unexpected;
        std::printf("UNEXPECTED %s %s: %s\n", skip ? "SKIP" : "FAIL", j.name.c_str(), reason.c_str());
      } else if (expected.empty()) {
        std::printf("%s %s: %s\n", skip ? "SKIP" : "FAIL", j.name.c_str(), reason.c_str());
      }
    }
    std::fflush(stdout);
    close(j.fd);
  };
  while (next < tests.size() || !running.empty()) {
    while (next < tests.size() && static_cast<int>(running.size()) < jobs) {
      running.push_back(spawn(self, dir, tests[next++], device));
    }
    bool progressed = false;
    for (size_t i = 0; i < running.size();) {
      Job& j = running[i];
      drain(j);
      int status = 0;
      pid_t r = waitpid(j.pid, &status, WNOHANG);
      double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - j.start).count();
      if (r == j.pid) {
        drain(j);
        std::string forced;
        if (WIFSIGNALED(status)) forced = "FAIL: crashed (signal " + std::to_string(WTERMSIG(status)) + ")";
        finish(j, forced);
      } else if (el > timeout) {
        kill(j.pid, SIGKILL);
        waitpid(j.pid, &status, 0);
        finish(j, "FAIL: timed out after " + std::to_string(static_cast<int>(timeout)) + " s");
      } else {
        ++i;
        continue;
      }
      running.erase(running.begin() + static_cast<long>(i));
      progressed = true;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!write_expected.empty()) {
    std::ofstream f(write_expected);
    if (!f) throw Error("[conformance] cannot write " + write_expected);
    for (const auto& [name, why] : failures) {
      std::string w = why;
      for (char& ch : w)
        if (ch == '\n' || ch == '#') ch = ' ';
      if (w.size() > 160) w = w.substr(0, 157) + "...";
      f << name << "  # " << w << "\n";
    }
  }
  std::printf("%d passed, %d failed, %d skipped (%zu tests, %.1f s, %.1f%% passed)\n", passed, failed, skipped,
              tests.size(), secs, 100.0 * passed / static_cast<double>(tests.size()));
  if (!expected.empty()) {
    if (unexpected) std::printf("%d unexpected results (see lines above)\n", unexpected);
    return unexpected ? 1 : 0;
  }
  return failed ? 1 : 0;
}

}  // namespace tg::tools
