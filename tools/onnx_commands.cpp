// tgraph info / run / dot / bench / compile on ONNX models.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

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

namespace {
// The whole of `v` read by `read` (std::stoll / std::stod), or nullopt.
template <class T, class Read>
std::optional<T> parse_whole(const std::string& v, Read read) {
  size_t used = 0;
  try {
    const T x = read(v, &used);
    if (!v.empty() && used == v.size()) return x;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}
}  // namespace

int64_t parse_integer(const std::string& cmd, const std::string& opt, const std::string& v, int64_t min) {
  const auto x = parse_whole<int64_t>(v, [](const std::string& s, size_t* n) { return std::stoll(s, n); });
  if (!x || *x < min)
    throw Error("[" + cmd + "] " + opt + " takes an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return *x;
}

double parse_seconds(const std::string& cmd, const std::string& opt, const std::string& v) {
  const auto x = parse_whole<double>(v, [](const std::string& s, size_t* n) { return std::stod(s, n); });
  if (!x || !(*x > 0) || *x > 1e9)
    throw Error("[" + cmd + "] " + opt + " takes a number of seconds > 0, got '" + v + "'");
  return *x;
}

bool is_tgx(const std::string& path) { return path.size() > 4 && path.compare(path.size() - 4, 4, ".tgx") == 0; }

const char* command_help(const std::string& cmd) {
  if (cmd == "info")
    return "usage: tgraph info MODEL.onnx|MODEL.tgx\n"
           "  prints the opset, inputs, outputs and the op histogram (a .tgx: its device, feeds, outputs,\n"
           "  variables)\n";
  if (cmd == "run")
    return "usage: tgraph run MODEL.onnx|MODEL.tgx --input NAME=FILE.npy ... --output-dir DIR [--device cpu|cuda]\n"
           "                 [--timeout SECONDS]\n"
           "  runs the model on NumPy inputs and writes each output as DIR/<output name>.npy; each input\n"
           "  must match the shape and dtype the model declares (-1 dims take any size)\n";
  if (cmd == "dot")
    return "usage: tgraph dot MODEL.onnx|MODEL.tgx [-o FILE.dot]\n"
           "  writes the imported graph (or the compiled executable's optimized graph) as Graphviz dot\n";
  if (cmd == "bench")
    return "usage: tgraph bench MODEL.onnx|MODEL.tgx [--device cpu|cuda] [--batch N] [--precision f32|tf32|bf16|f16]\n"
           "                   [--warmup N] [--iters N] [--shape NAME=D0,D1,...]... [--timeout SECONDS]\n"
           "  random inputs (dynamic dims: --batch for the first, 1 elsewhere, or --shape per input);\n"
           "  prints the compile time, the median latency and the throughput\n";
  if (cmd == "compile")
    return "usage: tgraph compile MODEL.onnx -o MODEL.tgx [--device cpu|cuda]\n"
           "  compiles the model and saves the executable (graph, device, weights) to a .tgx file; for cuda,\n"
           "  after one run on zeros, with the generated kernels' cubins (a load runs without compiling)\n";
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

// Model inputs: names and declared types, of an ONNX model or a saved executable.
struct Inputs {
  std::vector<std::string> names;
  std::vector<TensorType> types;
  std::string list() const {
    std::string l;
    for (const auto& n : names) l += (l.empty() ? "" : ", ") + n;
    return l.empty() ? "none" : l;
  }
  int find(const std::string& name) const {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return static_cast<int>(i);
    return -1;
  }
};

Inputs inputs_of_onnx(const std::string& path) {
  OnnxModelInfo info = inspect_onnx(path);
  Inputs in;
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    in.names.push_back(info.inputs[i].first);
    in.types.push_back(info.input_types[i]);
  }
  return in;
}

Inputs inputs_of_tgx(const Executable& exe) {
  Inputs in{exe.input_names(), exe.input_types()};
  for (size_t i = 0; i < in.names.size(); ++i)
    if (in.names[i].empty()) in.names[i] = "input" + std::to_string(i);
  return in;
}

// A saved executable runs on the device it was compiled for.
void check_tgx_device(const Executable& exe, const std::string& device, bool given, const char* cmd) {
  if (given && !(parse_device(device) == exe.device()))
    throw Error(std::string("[") + cmd + "] the executable was compiled for " + exe.device().str() + ", not " + device +
                " (compile it again with tgraph compile --device " + device + ")");
}

std::string safe_name(std::string s) {
  for (char& c : s)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  return s.empty() ? "output" : s;
}

}  // namespace

int cmd_info(const std::vector<std::string>& args) {
  std::string path = need_model(args, "info");
  if (is_tgx(path)) {
    Executable exe = Executable::load(path);
    const Inputs in = inputs_of_tgx(exe);
    std::printf("executable: %s\ndevice: %s\ninputs:\n", path.c_str(), exe.device().str().c_str());
    for (size_t i = 0; i < in.names.size(); ++i) std::printf("  %s: %s\n", in.names[i].c_str(), in.types[i].str().c_str());
    std::printf("outputs:\n");
    const std::vector<TensorType> outs = exe.declared_output_types();
    for (size_t i = 0; i < outs.size(); ++i) std::printf("  output%zu: %s\n", i, outs[i].str().c_str());
    int64_t bytes = 0;
    const std::vector<std::string> vars = exe.variable_names();
    for (const auto& v : vars) bytes += static_cast<int64_t>(exe.variable(v).nbytes());
    std::printf("variables: %zu (%.1f MiB)\n", vars.size(), static_cast<double>(bytes) / (1 << 20));
    return 0;
  }
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
  bool device_given = false;
  RunOptions limits;  // --timeout; Ctrl-C interrupts any run (tgraph_main.cpp)
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
      if (eq == std::string::npos || eq == 0) throw Error("[run] --input takes NAME=FILE.npy, got '" + v + "'");
      if (!files.emplace(v.substr(0, eq), v.substr(eq + 1)).second)
        throw Error("[run] --input " + v.substr(0, eq) + " is given twice");
    } else if (a == "--output-dir") out_dir = next();
    else if (a == "--device") device = next(), device_given = true;
    else if (a == "--timeout") limits.timeout_s = parse_seconds("run", a, next());
    else if (!a.empty() && a[0] == '-') throw Error("[run] unknown option " + a);
    else model = a;
  }
  if (model.empty()) throw Error("[run] give a model file (try 'tgraph run --help')");
  if (out_dir.empty()) throw Error("[run] give --output-dir DIR");
  const Device dev = parse_device(device);
  std::optional<Executable> loaded;
  if (is_tgx(model)) {
    loaded = Executable::load(model);
    check_tgx_device(*loaded, device, device_given, "run");
  }
  const Inputs declared = loaded ? inputs_of_tgx(*loaded) : inputs_of_onnx(model);
  // Every input named, known, and of the declared dtype and shape, before anything compiles.
  for (const auto& [name, file] : files)
    if (declared.find(name) < 0)
      throw Error("[run] the model has no input named '" + name + "' (its inputs: " + declared.list() + ")");
  std::vector<TensorData> inputs;
  OnnxImportOptions opt;
  for (size_t i = 0; i < declared.names.size(); ++i) {
    const std::string& name = declared.names[i];
    auto it = files.find(name);
    if (it == files.end())
      throw Error("[run] missing --input " + name + "=FILE.npy (the model's inputs: " + declared.list() + ")");
    TensorData t = read_npy(it->second);
    const TensorType& want = declared.types[i];
    if (t.dtype() != want.dtype)
      throw Error("[run] input " + name + " (" + it->second + ") is " + dtype_name(t.dtype()) + ", the model expects " +
                  dtype_name(want.dtype));
    if (!shape_compatible(want.shape, t.shape()))
      throw Error("[run] input " + name + " (" + it->second + ") is " + t.shape().str() + ", the model declares " +
                  want.shape.str());
    opt.input_shapes[name] = t.shape();
    inputs.push_back(std::move(t));
  }
  std::vector<std::string> output_names;
  Executable exe = [&] {
    if (loaded) {
      for (size_t i = 0; i < loaded->declared_output_types().size(); ++i) output_names.push_back("output" + std::to_string(i));
      return *loaded;
    }
    OnnxModel m = import_onnx(model, opt);
    output_names = m.output_names;
    CompileOptions co;
    co.device = dev;
    return m.compile(co);
  }();
  std::vector<TensorData> outs = exe.run(inputs, limits);
  mkdir(out_dir.c_str(), 0755);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string path = out_dir + "/" + safe_name(output_names[i]) + ".npy";
    write_npy(path, outs[i]);
    std::printf("%s: %s -> %s\n", output_names[i].c_str(), outs[i].type().str().c_str(), path.c_str());
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
  std::string dot = is_tgx(model) ? Executable::load(model).dot() : import_onnx(model).graph.dot();
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
  bool batch_given = false, device_given = false, precision_given = false;
  int64_t warmup = 3, iters = 20;
  RunOptions limits;  // --timeout, per run
  std::map<std::string, Shape> shapes;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error("[bench] " + a + " needs a value");
      return args[++i];
    };
    if (a == "--device") device = next(), device_given = true;
    else if (a == "--batch") batch = parse_integer("bench", a, next(), 1), batch_given = true;
    else if (a == "--precision") precision = next(), precision_given = true;
    else if (a == "--warmup") warmup = parse_integer("bench", a, next(), 0);
    else if (a == "--iters") iters = parse_integer("bench", a, next(), 1);
    else if (a == "--timeout") limits.timeout_s = parse_seconds("bench", a, next());
    else if (a == "--shape") {
      std::string v = next();
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) throw Error("[bench] --shape takes NAME=D0,D1,..., got '" + v + "'");
      std::vector<int64_t> dims;
      std::string rest = v.substr(eq + 1);
      for (size_t p = 0; p <= rest.size();) {
        size_t comma = rest.find(',', p);
        if (comma == std::string::npos) comma = rest.size();
        if (comma > p) dims.push_back(parse_integer("bench", "--shape " + v.substr(0, eq), rest.substr(p, comma - p), 0));
        p = comma + 1;
      }
      if (!shapes.emplace(v.substr(0, eq), Shape(dims)).second)
        throw Error("[bench] --shape " + v.substr(0, eq) + " is given twice");
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
  std::optional<Executable> loaded;
  if (is_tgx(model)) {
    loaded = Executable::load(model);
    check_tgx_device(*loaded, device, device_given, "bench");
    if (precision_given) throw Error("[bench] --precision: a saved executable keeps the precision it was compiled with");
    co.device = loaded->device();
  }
  // Fix dynamic dims first so the import sees static shapes.
  const Inputs declared = loaded ? inputs_of_tgx(*loaded) : inputs_of_onnx(model);
  OnnxImportOptions opt;
  std::vector<TensorData> inputs;
  bool batch_used = false;
  for (size_t i = 0; i < declared.names.size(); ++i) {
    const Shape& want = declared.types[i].shape;
    if (!want.ranked()) throw Error("[bench] input " + declared.names[i] + " has no known rank: give --shape");
    std::vector<int64_t> d = want.dims();
    auto given = shapes.find(declared.names[i]);
    if (given != shapes.end()) {
      if (!shape_compatible(want, given->second))
        throw Error("[bench] --shape " + declared.names[i] + "=" + given->second.str() + ": the model declares " +
                    want.str());
      d = given->second.dims();
      shapes.erase(given);
    } else {
      for (size_t k = 0; k < d.size(); ++k)
        if (d[k] < 0) {
          batch_used |= k == 0;
          d[k] = k == 0 ? batch : 1;
        }
    }
    opt.input_shapes[declared.names[i]] = Shape(d);
    DType dt = declared.types[i].dtype;
    inputs.push_back(is_float(dt) ? TensorData::uniform(Shape(d), -1, 1, dt, i)
                                  : TensorData::uniform(Shape(d), 0, 2, dt, i));
  }
  if (!shapes.empty())
    throw Error("[bench] the model has no input named '" + shapes.begin()->first + "' (its inputs: " + declared.list() + ")");
  if (batch_given && !batch_used)
    throw Error("[bench] --batch " + std::to_string(batch) + ": no input has a dynamic first dim (" +
                (declared.types.empty() ? std::string("no inputs") : declared.names[0] + " is " + declared.types[0].shape.str()) +
                "); give --shape NAME=D0,D1,... instead");
  std::optional<OnnxModel> m;
  if (!loaded) m = import_onnx(model, opt);
  auto t0 = std::chrono::steady_clock::now();
  Executable exe = loaded ? *loaded : m->compile(co);
  double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "compiled for %s in %.2f s\n", co.device.str().c_str(), compile_s);
  for (int64_t i = 0; i < warmup; ++i) {
    std::fprintf(stderr, "\rwarm-up %lld/%lld", static_cast<long long>(i + 1), static_cast<long long>(warmup));
    exe.run(inputs, limits);
  }
  std::vector<double> ms;
  for (int64_t i = 0; i < iters; ++i) {
    std::fprintf(stderr, "\rrun %lld/%lld   ", static_cast<long long>(i + 1), static_cast<long long>(iters));
    auto s = std::chrono::steady_clock::now();
    exe.run(inputs, limits);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::fprintf(stderr, "\n");
  std::sort(ms.begin(), ms.end());
  double med = ms[ms.size() / 2];
  int64_t samples = inputs.empty() || inputs[0].shape().rank() == 0 ? 1 : inputs[0].shape()[0];
  std::printf("model: %s\ndevice: %s\nbatch: %lld\nmedian latency: %.3f ms (min %.3f, max %.3f, %d runs)\n"
              "throughput: %.1f samples/s\n",
              model.c_str(), co.device.str().c_str(), static_cast<long long>(samples), med, ms.front(), ms.back(),
              static_cast<int>(iters), 1000.0 * static_cast<double>(samples) / med);
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
  // On a GPU, one run on zeros (inputs of static shapes) builds the generated kernels, and the
  // file then carries their cubins: a load elsewhere runs without compiling them.
  std::string built;
  if (co.device.kind == Device::Kind::cuda) {
    std::vector<TensorData> zeros;
    for (const TensorType& t : exe.input_types())
      if (t.shape.is_static()) zeros.emplace_back(t.shape, t.dtype);
    if (zeros.size() == exe.input_types().size()) {
      try {
        exe.run(zeros);
        built = ", with its kernels";
      } catch (const Error& e) {  // still a valid file: its kernels compile where it is loaded
        std::fprintf(stderr, "[compile] a run on zeros failed, the file holds no kernels: %s\n", e.what());
      }
    }
  }
  exe.save(out);
  std::printf("%s -> %s (%s%s)\n", model.c_str(), out.c_str(), co.device.str().c_str(), built.c_str());
  return 0;
}

}  // namespace tg::tools
