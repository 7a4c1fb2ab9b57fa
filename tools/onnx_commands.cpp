// tgraph info / run / dot / bench / compile on ONNX models.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "commands.h"
#include "npy.h"
#include "tgraph/error.h"
#include "tgraph/executable.h"
#include "tgraph/onnx.h"

namespace tg::tools {

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos)
    return Device::cuda(std::stoi(s.substr(5)));
  throw Error("[tgraph] unknown device '" + s + "' (cpu, cuda or cuda:N)");
}

const char* command_help(const std::string& cmd) {
  if (cmd == "info") return "usage: tgraph info MODEL.onnx\n  prints the opset, inputs, outputs and the op histogram\n";
  if (cmd == "run")
    return "usage: tgraph run MODEL.onnx --input NAME=FILE.npy ... --output-dir DIR [--device cpu|cuda]\n"
           "  runs the model on NumPy inputs and writes each output as DIR/<output name>.npy\n";
  if (cmd == "dot")
    return "usage: tgraph dot MODEL.onnx|MODEL.tgx [-o FILE.dot]\n"
           "  writes the imported graph (or the compiled executable's optimized graph) as Graphviz dot\n";
  if (cmd == "bench")
    return "usage: tgraph bench MODEL.onnx [--device cpu|cuda] [--batch N] [--precision f32|tf32|bf16|f16]\n"
           "                   [--warmup N] [--iters N] [--shape NAME=D0,D1,...]...\n"
           "  random inputs (dynamic dims: --batch for the first, 1 elsewhere, or --shape per input);\n"
           "  prints the compile time, the median latency and the throughput\n";
  if (cmd == "compile")
    return "usage: tgraph compile MODEL.onnx -o MODEL.tgx [--device cpu|cuda]\n"
           "  compiles the model and saves the executable (graph, device, weights) to a .tgx file\n";
  if (cmd == "conformance")
    return "usage: tgraph conformance DIR [--device cpu|cuda] [--expected FILE] [--write-expected FILE]\n"
           "                         [--timeout SECONDS] [-j JOBS] [--filter SUBSTRING]\n"
           "  runs ONNX's backend node tests (DIR/test_*/model.onnx with test_data_set_0), rtol 1e-3,\n"
           "  atol 1e-7; prints 'N passed, N failed, N skipped'. With --expected, exits non-zero on a\n"
           "  failure not listed or a listed test that passes; lines are 'name  # reason'.\n";
  return nullptr;
}

namespace {

std::string need_model(const std::vector<std::string>& args, const char* cmd) {
  for (const auto& a : args)
    if (!a.empty() && a[0] != '-') return a;
  throw Error(std::string("[") + cmd + "] give a model file (try 'tgraph " + cmd + " --help')");
}

std::string safe_name(std::string s) {
  for (char& c : s)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  return s.empty() ? "output" : s;
}

}  // namespace

int cmd_info(const std::vector<std::string>& args) {
  std::string path = need_model(args, "info");
  OnnxModelInfo m = inspect_onnx(path);
  std::printf("model: %s\nproducer: %s\nir version: %lld\nopset:", path.c_str(), m.producer.c_str(),
              static_cast<long long>(m.ir_version));
  for (const auto& [d, v] : m.opsets) std::printf(" %s %lld", d.empty() ? "ai.onnx" : d.c_str(), static_cast<long long>(v));
  std::printf("\ninputs:\n");
  for (const auto& [n, t] : m.inputs) std::printf("  %s: %s\n", n.c_str(), t.c_str());
  std::printf("outputs:\n");
  for (const auto& [n, t] : m.outputs) std::printf("  %s: %s\n", n.c_str(), t.c_str());
  std::printf("initializers: %lld (%.1f MiB)\n", static_cast<long long>(m.num_initializers),
              static_cast<double>(m.initializer_bytes) / (1 << 20));
  std::vector<std::pair<std::string, int64_t>> h(m.op_histogram.begin(), m.op_histogram.end());
  std::sort(h.begin(), h.end(), [](auto& a, auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  int64_t total = 0;
  for (auto& [op, n] : h) total += n;
  std::printf("ops (%lld nodes):\n", static_cast<long long>(total));
  for (auto& [op, n] : h) std::printf("  %-28s %lld\n", op.c_str(), static_cast<long long>(n));
  try {
    OnnxModel im = import_onnx(path);
    std::printf("import: ok (%lld tgraph nodes)\n", static_cast<long long>(im.graph.num_nodes()));
  } catch (const Error& e) {
    // Models whose shape computations need static shapes import once symbolic dims are fixed.
    OnnxImportOptions fixed;
    bool dynamic = false;
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      std::vector<int64_t> d = m.input_types[i].shape.dims();
      for (auto& v : d)
        if (v < 0) v = 1, dynamic = true;
      fixed.input_shapes[m.inputs[i].first] = Shape(d);
    }
    try {
      if (!dynamic) throw Error("");
      OnnxModel im = import_onnx(path, fixed);
      std::printf("import: ok with symbolic dims set to 1 (%lld tgraph nodes); with them dynamic: %s\n",
                  static_cast<long long>(im.graph.num_nodes()), e.what());
    } catch (const Error&) {
      std::printf("import: fails: %s\n", e.what());
    }
  }
  return 0;
}

int cmd_run(const std::vector<std::string>& args) {
  std::string model, out_dir, device = "cpu";
  std::map<std::string, std::string> files;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error("[run] " + a + " needs a value");
      return args[++i];
    };
    if (a == "--input") {
      std::string v = next();
      size_t eq = v.find('=');
      if (eq == std::string::npos) throw Error("[run] --input takes NAME=FILE.npy, got '" + v + "'");
      files[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (a == "--output-dir") out_dir = next();
    else if (a == "--device") device = next();
    else if (!a.empty() && a[0] == '-') throw Error("[run] unknown option " + a);
    else model = a;
  }
  if (model.empty()) throw Error("[run] give a model file (try 'tgraph run --help')");
  if (out_dir.empty()) throw Error("[run] give --output-dir DIR");
  std::map<std::string, TensorData> data;
  OnnxImportOptions opt;
  for (const auto& [name, file] : files) {
    data[name] = read_npy(file);
    opt.input_shapes[name] = data[name].shape();
  }
  OnnxModel m = import_onnx(model, opt);
  std::vector<TensorData> inputs;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    auto it = data.find(m.input_names[i]);
    if (it == data.end()) throw Error("[run] missing --input " + m.input_names[i] + "=FILE.npy");
    if (it->second.dtype() != m.input_types[i].dtype)
      throw Error("[run] input " + m.input_names[i] + " is " + dtype_name(it->second.dtype()) + ", the model expects " +
                  dtype_name(m.input_types[i].dtype));
    inputs.push_back(it->second);
    data.erase(it);
  }
  if (!data.empty()) throw Error("[run] the model has no input named '" + data.begin()->first + "'");
  CompileOptions co;
  co.device = parse_device(device);
  Executable exe = m.compile(co);
  std::vector<TensorData> outs = exe.run(inputs);
  mkdir(out_dir.c_str(), 0755);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string path = out_dir + "/" + safe_name(m.output_names[i]) + ".npy";
    write_npy(path, outs[i]);
    std::printf("%s: %s -> %s\n", m.output_names[i].c_str(), outs[i].type().str().c_str(), path.c_str());
  }
  return 0;
}

int cmd_dot(const std::vector<std::string>& args) {
  std::string model, out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o" && i + 1 < args.size()) out = args[++i];
    else if (!args[i].empty() && args[i][0] == '-') throw Error("[dot] unknown option " + args[i]);
    else model = args[i];
  }
  if (model.empty()) throw Error("[dot] give a model file (try 'tgraph dot --help')");
  const bool tgx = model.size() > 4 && model.compare(model.size() - 4, 4, ".tgx") == 0;
  std::string dot = tgx ? Executable::load(model).dot() : import_onnx(model).graph.dot();
  if (out.empty()) {
    std::fwrite(dot.data(), 1, dot.size(), stdout);
    return 0;
  }
  FILE* f = std::fopen(out.c_str(), "w");
  if (!f) throw Error("[dot] cannot write " + out);
  std::fwrite(dot.data(), 1, dot.size(), f);
  std::fclose(f);
  return 0;
}

int cmd_bench(const std::vector<std::string>& args) {
  std::string model, device = "cpu", precision = "f32";
  int64_t batch = 1;
  int warmup = 3, iters = 20;
  std::map<std::string, Shape> shapes;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error("[bench] " + a + " needs a value");
      return args[++i];
    };
    if (a == "--device") device = next();
    else if (a == "--batch") batch = std::stoll(next());
    else if (a == "--precision") precision = next();
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--iters") iters = std::max(1, std::stoi(next()));
    else if (a == "--shape") {
      std::string v = next();
      size_t eq = v.find('=');
      if (eq == std::string::npos) throw Error("[bench] --shape takes NAME=D0,D1,..., got '" + v + "'");
      std::vector<int64_t> dims;
      std::string rest = v.substr(eq + 1);
      for (size_t p = 0; p <= rest.size();) {
        size_t comma = rest.find(',', p);
        if (comma == std::string::npos) comma = rest.size();
        if (comma > p) dims.push_back(std::stoll(rest.substr(p, comma - p)));
        p = comma + 1;
      }
      shapes[v.substr(0, eq)] = Shape(dims);
    }
    else if (!a.empty() && a[0] == '-') throw Error("[bench] unknown option " + a);
    else model = a;
  }
  if (model.empty()) throw Error("[bench] give a model file (try 'tgraph bench --help')");
  CompileOptions co;
  co.device = parse_device(device);
  if (precision == "f32") co.precision = Precision::f32;
  else if (precision == "tf32") co.precision = Precision::tf32;
  else if (precision == "bf16") co.precision = Precision::bf16;
  else if (precision == "f16") co.precision = Precision::f16;
  else throw Error("[bench] unknown precision '" + precision + "'");
  // Fix dynamic dims first so the import sees static shapes.
  OnnxModelInfo probe = inspect_onnx(model);
  OnnxImportOptions opt;
  std::vector<TensorData> inputs;
  for (size_t i = 0; i < probe.inputs.size(); ++i) {
    std::vector<int64_t> d = probe.input_types[i].shape.dims();
    for (size_t k = 0; k < d.size(); ++k)
      if (d[k] < 0) d[k] = k == 0 ? batch : 1;
    auto given = shapes.find(probe.inputs[i].first);
    if (given != shapes.end()) {
      d = given->second.dims();
      shapes.erase(given);
    }
    opt.input_shapes[probe.inputs[i].first] = Shape(d);
    DType dt = probe.input_types[i].dtype;
    inputs.push_back(is_float(dt) ? TensorData::uniform(Shape(d), -1, 1, dt, i)
                                  : TensorData::uniform(Shape(d), 0, 2, dt, i));
  }
  if (!shapes.empty()) throw Error("[bench] the model has no input named '" + shapes.begin()->first + "'");
  OnnxModel m = import_onnx(model, opt);
  auto t0 = std::chrono::steady_clock::now();
  Executable exe = m.compile(co);
  double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "compiled for %s in %.2f s\n", co.device.str().c_str(), compile_s);
  for (int i = 0; i < warmup; ++i) {
    std::fprintf(stderr, "\rwarm-up %d/%d", i + 1, warmup);
    exe.run(inputs);
  }
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    std::fprintf(stderr, "\rrun %d/%d   ", i + 1, iters);
    auto s = std::chrono::steady_clock::now();
    exe.run(inputs);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::fprintf(stderr, "\n");
  std::sort(ms.begin(), ms.end());
  double med = ms[ms.size() / 2];
  int64_t samples = inputs.empty() || inputs[0].shape().rank() == 0 ? 1 : inputs[0].shape()[0];
  std::printf("model: %s\ndevice: %s\nbatch: %lld\nmedian latency: %.3f ms (min %.3f, max %.3f, %d runs)\n"
              "throughput: %.1f samples/s\n",
              model.c_str(), co.device.str().c_str(), static_cast<long long>(samples), med, ms.front(), ms.back(),
              iters, 1000.0 * static_cast<double>(samples) / med);
  return 0;
}

int cmd_compile(const std::vector<std::string>& args) {
  std::string model, out, device = "cpu";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o" && i + 1 < args.size()) out = args[++i];
    else if (args[i] == "--device" && i + 1 < args.size()) device = args[++i];
    else if (!args[i].empty() && args[i][0] == '-') throw Error("[compile] unknown option " + args[i]);
    else model = args[i];
  }
  if (model.empty() || out.empty()) throw Error("[compile] give MODEL.onnx and -o MODEL.tgx (try 'tgraph compile --help')");
  CompileOptions co;
  co.device = parse_device(device);
  Executable exe = import_onnx(model).compile(co);
  exe.save(out);
  std::printf("%s -> %s (%s)\n", model.c_str(), out.c_str(), co.device.str().c_str());
  return 0;
}

}  // namespace tg::tools
