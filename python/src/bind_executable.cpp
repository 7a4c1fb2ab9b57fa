// tgraph.Executable (run, run on device tensors, variables, save / load) and the ONNX importer.
#include <signal.h>

#include <csignal>

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "py_args.h"
#include "tgraph/checkpoint.h"
#include "py_tensor.h"
#ifdef TGRAPH_HAVE_ONNX
#include "tgraph/onnx.h"
#endif

namespace tgpy {
using namespace nb::literals;

namespace {

// While it lives (in the main thread only), SIGINT interrupts tgraph's runs instead of only
// setting Python's flag; the previous handler comes back afterwards.
class SigintToRuns {
 public:
  explicit SigintToRuns(bool install) : installed_(install) {
    if (!installed_) return;
    fired_ = 0;
    struct sigaction sa {};
    sa.sa_handler = [](int) {
      fired_ = 1;
      tg::interrupt_runs();
    };
    sigemptyset(&sa.sa_mask);
    installed_ = sigaction(SIGINT, &sa, &previous_) == 0;
  }
  ~SigintToRuns() {
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
  }
  SigintToRuns(const SigintToRuns&) = delete;
  SigintToRuns& operator=(const SigintToRuns&) = delete;
  bool fired() const { return fired_ != 0; }

 private:
  static inline volatile std::sig_atomic_t fired_ = 0;
  bool installed_;
  struct sigaction previous_ {};
};

}  // namespace

void bind_executable(nb::module_& m) {
  nb::class_<tg::Executable>(m, "Executable", "A compiled graph: run it many times, save it, load it.")
      .def("_run",
           [](const tg::Executable& e, std::vector<tg::TensorData> inputs, double timeout, bool main_thread) {
             std::vector<tg::TensorType> types = e.input_types();
             for (size_t i = 0; i < inputs.size() && i < types.size(); ++i)
               inputs[i] = feed_value(inputs[i], types[i].dtype);
             tg::RunOptions options;
             options.timeout_s = timeout;
             std::vector<tg::TensorData> out;
             bool interrupted = false;
             {
               // Python handles Ctrl-C only between bytecodes, which a long run never reaches:
               // in the main thread the run itself stops and KeyboardInterrupt is raised.
               SigintToRuns bridge(main_thread);
               nb::gil_scoped_release release;
               try {
                 out = e.run(inputs, options);
               } catch (const tg::Error&) {
                 if (!bridge.fired()) throw;
                 interrupted = true;
               }
             }
             if (interrupted) {
               PyErr_SetNone(PyExc_KeyboardInterrupt);
               throw nb::python_error();
             }
             return out;
           },
           "inputs"_a, "timeout"_a = 0.0, "main_thread"_a = false)
      .def("run_device",
           [](const tg::Executable& e, const std::vector<tg::DeviceTensor>& inputs, std::optional<uintptr_t> stream,
              const std::vector<size_t>& donate) {
             nb::gil_scoped_release release;
             if (stream) return e.run_device(inputs, reinterpret_cast<void*>(*stream), donate);
             for (size_t i : donate)  // a run complete on return reuses nothing: checked only
               if (i >= inputs.size())
                 throw tg::Error("[run] donated input " + std::to_string(i) + ": the run has " +
                                 std::to_string(inputs.size()) + " inputs");
             return e.run_device(inputs);
           },
           "inputs"_a, "stream"_a = nb::none(), "donate"_a = std::vector<size_t>{},
           "Runs with inputs and outputs in device memory: outputs stay on the executable's device. "
           "stream: a CUDA stream's handle (torch.cuda.current_stream().cuda_stream; 0 is the "
           "legacy default stream): the run is queued in that stream's order and returns without "
           "waiting; read the outputs on that stream. None: the outputs are complete on return. "
           "donate: positions of inputs the caller will not read again (JAX's donate_argnums): a "
           "stream-ordered CUDA run may put its own buffers in their memory once it has read "
           "them, so their contents are unspecified afterwards.")
      .def("output_types", &tg::Executable::output_types, "input_types"_a)
      .def_prop_ro("input_types", &tg::Executable::input_types)
      .def_prop_ro("input_names", &tg::Executable::input_names, "The feeds' names, in feed order.")
      .def_prop_ro("declared_output_types", &tg::Executable::declared_output_types)
      .def_prop_ro("output_permutations", &tg::Executable::output_permutations,
                   "Per output, the axes that view it as the value compiled for (empty: as it is); "
                   "made by compile(..., free_output_layouts=True).")
      .def("variable", &tg::Executable::variable, "name"_a, "The current value of a variable (a copy).")
      .def("set_variable", &tg::Executable::set_variable, "name"_a, "value"_a)
      .def_prop_ro("variable_names", &tg::Executable::variable_names)
      .def("save", &tg::Executable::save, "path"_a, nb::call_guard<nb::gil_scoped_release>(),
           "Writes the executable to `path` (atomically). Releases the GIL: another thread may save "
           "while this one runs it.")
      .def("save_checkpoint", [](const tg::Executable& e, const std::string& path) { tg::save_checkpoint(e, path); },
           "path"_a, "Writes every variable to `path`, atomically (a crash or a second writer leaves one whole file).")
      .def("load_checkpoint",
           [](const tg::Executable& e, const std::string& path, bool strict) {
             return tg::load_checkpoint(e, path, {.strict = strict});
           },
           "path"_a, "strict"_a = true,
           "Restores the variables saved in `path`; returns their names. The whole file is checked first: "
           "on any problem it raises and no variable changes. strict=False lets variables missing from the "
           "file keep their values.")
      .def_static("load", &tg::Executable::load, "path"_a)
      .def("__str__", &tg::Executable::str)
      .def("dot", &tg::Executable::dot)
      .def_prop_ro("device", &tg::Executable::device)
      .def_prop_ro("planned_arena_bytes", &tg::Executable::planned_arena_bytes)
      .def_prop_ro("run_stats",
                   [](const tg::Executable& e) {
                     tg::RunStats s = e.run_stats();
                     nb::dict d;
                     d["captures"] = s.captures;
                     d["replays"] = s.replays;
                     d["uncaptured"] = s.uncaptured;
                     d["instances"] = s.instances;
                     d["input_moves"] = s.input_moves;
                     d["capture_error"] = s.capture_error;
                     d["kernels_compiled"] = s.kernels_compiled;
                     d["kernels_from_file"] = s.kernels_from_file;
                     d["graph_bytes"] = s.graph_bytes;
                     d["graph_live_peak"] = s.graph_live_peak;
                     d["buffers_in_donated"] = s.buffers_in_donated;
                     return d;
                   },
                   "How the runs went where they are captured into CUDA graphs (all zero on the CPU): "
                   "captures, replays, uncaptured (op-by-op) runs, instances held, input_moves "
                   "(recaptures because an input read in place moved) and capture_error; and the generated "
                   "kernels NVRTC compiled for them (kernels_compiled) or that came from the file the "
                   "executable was loaded from (kernels_from_file); graph_bytes, the device memory its "
                   "captured graphs hold, and graph_live_peak, the most of it their buffers used at once; "
                   "buffers_in_donated, their buffers placed in donated inputs' memory (run_device's donate).")
      .def("__repr__", [](const tg::Executable& e) {
        return "Executable(" + std::to_string(e.input_types().size()) + " inputs, " +
               std::to_string(e.declared_output_types().size()) + " outputs, " + e.device().str() + ")";
      });

  nb::module_ onnx = m.def_submodule("onnx", "The ONNX frontend: a model file -> a Graph.");
#ifdef TGRAPH_HAVE_ONNX
  nb::class_<tg::OnnxModel>(onnx, "OnnxModel")
      .def_ro("graph", &tg::OnnxModel::graph)
      .def_prop_ro("inputs", [](const tg::OnnxModel& mo) {
        std::vector<PyTensor> r;
        for (const tg::Tensor& t : mo.inputs) r.push_back(wrap(mo.graph, t));
        return r;
      })
      .def_prop_ro("outputs", [](const tg::OnnxModel& mo) {
        std::vector<PyTensor> r;
        for (const tg::Tensor& t : mo.outputs) r.push_back(wrap(mo.graph, t));
        return r;
      })
      .def_ro("input_names", &tg::OnnxModel::input_names)
      .def_ro("input_types", &tg::OnnxModel::input_types)
      .def_ro("output_names", &tg::OnnxModel::output_names)
      .def_ro("opset", &tg::OnnxModel::opset)
      .def_ro("producer", &tg::OnnxModel::producer)
      .def_ro("op_histogram", &tg::OnnxModel::op_histogram)
      .def("_compile", &tg::OnnxModel::compile, "options"_a);
  onnx.def("_import",
           [](const std::string& path, const std::map<std::string, tg::Shape>& shapes,
              const std::vector<tg::Shape>& shapes_in_order) {
             tg::OnnxImportOptions o;
             o.input_shapes = shapes;
             o.input_shapes_in_order = shapes_in_order;
             return tg::import_onnx(path, o);
           });
  onnx.def("_import_bytes", [](nb::bytes b, const std::map<std::string, tg::Shape>& shapes) {
    tg::OnnxImportOptions o;
    o.input_shapes = shapes;
    return tg::import_onnx_bytes(std::string(b.c_str(), b.size()), o);
  });
  onnx.def("max_opset", &tg::onnx_max_opset);
  onnx.attr("available") = true;
#else
  onnx.attr("available") = false;
#endif
}

}  // namespace tgpy
