#pragma once
// A small model library: modules own their variables (made with seeded initialisers when the
// module is constructed) and build their part of the graph in forward(). Variables are named
// "<module name>.<param>" ("layer1.0.conv1.weight"), so checkpoints are readable.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tgraph/graph.h"

namespace tg::nn {

// ---- initialisers ----------------------------------------------------------------------------
/// How a parameter is initialised.
enum class Init { zeros, ones, normal, uniform, he_normal, he_uniform, glorot_normal, glorot_uniform };
/// An initial value: normal/uniform use `scale` as stddev / half-width; he_* and glorot_* use
/// fan_in / fan_out (He: stddev sqrt(2/fan_in); Glorot: sqrt(2/(fan_in+fan_out))).
TensorData init_value(Shape shape, Init init, int64_t fan_in, int64_t fan_out, uint64_t seed,
                      double scale = 0.02, DType dtype = DType::f32);
/// A seed derived from a base seed and a parameter name (stable across platforms).
uint64_t seed_for(uint64_t base, const std::string& name);

// ---- modules ---------------------------------------------------------------------------------
/// Whether training-only behaviour (batch statistics, dropout) runs: fixed when the graph is
/// built (the fastest graph), or chosen per run by a bool scalar tensor (a placeholder).
struct Mode {
  bool training = false;
  /// When valid, a bool scalar that decides at run time; `training` is then ignored.
  Tensor flag;
};

/// Base of every layer and model.
class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Builds this module's computation on x.
  virtual Tensor forward(Graph& g, Tensor x) = 0;
  /// Trainable variables of this module and its children, in construction order.
  std::vector<Tensor> parameters() const;
  /// Non-trainable state (BatchNorm running statistics, dropout random state).
  std::vector<Tensor> buffers() const;
  /// State updates made by forward() calls so far (running statistics, random state): add
  /// them to compile's target ops (or run the loss under control_dependency of them).
  std::vector<Operation> updates() const;
  /// Sets the mode of this module and every child.
  void set_mode(const Mode& m);
  void train(bool on = true) { set_mode({on, {}}); }
  void eval() { train(false); }
  const Mode& mode() const { return mode_; }
  const std::string& name() const { return name_; }
  /// Children in registration order.
  const std::vector<std::shared_ptr<Module>>& children() const { return children_; }

 protected:
  /// Makes a trainable variable "<name>.<local>".
  Tensor add_parameter(Graph& g, const std::string& local, const TensorData& init);
  /// Makes a non-trainable variable "<name>.<local>".
  Tensor add_buffer(Graph& g, const std::string& local, const TensorData& init);
  /// Registers a child; returns it.
  template <class M>
  std::shared_ptr<M> add_child(std::shared_ptr<M> m) {
    children_.push_back(m);
    return m;
  }
  /// Records a state update made by forward().
  void add_update(Operation op) { updates_.push_back(op); }
  /// "<name>.<local>" (or just local when this module has no name).
  std::string child_name(const std::string& local) const;

  Mode mode_;

 private:
  std::string name_;
  std::vector<Tensor> params_, buffers_;
  std::vector<Operation> updates_;
  std::vector<std::shared_ptr<Module>> children_;
};

/// y = x W + b over the last dim; W is [in, out].
class Linear : public Module {
 public:
  struct Options {
    bool bias = true;
    Init init = Init::glorot_uniform;
    uint64_t seed = 0;
    DType dtype = DType::f32;
  };
  Linear(Graph& g, const std::string& name, int64_t in, int64_t out, const Options& o);
  Linear(Graph& g, const std::string& name, int64_t in, int64_t out) : Linear(g, name, in, out, Options{}) {}
  Tensor forward(Graph& g, Tensor x) override;
  Tensor weight, bias;  // bias is empty without one
};

/// 2-D convolution, NHWC activations and HWIO weights by default.
class Conv2d : public Module {
 public:
  struct Options {
    int64_t stride = 1;
    /// -1: "same"-style padding of (kernel-1)/2 each side (odd kernels); otherwise explicit.
    int64_t padding = -1;
    int64_t dilation = 1;
    int64_t groups = 1;
    bool bias = true;
    Init init = Init::he_normal;
    uint64_t seed = 0;
    Layout data_layout = Layout::nhwc;
    DType dtype = DType::f32;
  };
  Conv2d(Graph& g, const std::string& name, int64_t in_channels, int64_t out_channels, int64_t kernel,
         const Options& o);
  Conv2d(Graph& g, const std::string& name, int64_t in_channels, int64_t out_channels, int64_t kernel)
      : Conv2d(g, name, in_channels, out_channels, kernel, Options{}) {}
  Tensor forward(Graph& g, Tensor x) override;
  Tensor weight, bias;
  ConvDesc desc;
};

/// Batch normalisation over the channel axis. Training: batch statistics, and running
/// statistics updated as running = (1 - momentum) * running + momentum * batch (variance
/// unbiased) by assign ops recorded in updates(). Inference: running statistics.
class BatchNorm2d : public Module {
 public:
  struct Options {
    double momentum = 0.1;
    double epsilon = 1e-5;
    /// -1: the last axis (NHWC); 1 for NCHW.
    int64_t axis = -1;
    DType dtype = DType::f32;
  };
  BatchNorm2d(Graph& g, const std::string& name, int64_t channels, const Options& o);
  BatchNorm2d(Graph& g, const std::string& name, int64_t channels) : BatchNorm2d(g, name, channels, Options{}) {}
  Tensor forward(Graph& g, Tensor x) override;
  Tensor gamma, beta, running_mean, running_var;
  Options options;
};

/// Layer normalisation over the last dim.
class LayerNorm : public Module {
 public:
  LayerNorm(Graph& g, const std::string& name, int64_t dim, double epsilon = 1e-5, DType dtype = DType::f32);
  Tensor forward(Graph& g, Tensor x) override;
  Tensor gamma, beta;
  double epsilon;
};

/// Rows of a [num, dim] table gathered by integer ids: [..] -> [.., dim].
class Embedding : public Module {
 public:
  Embedding(Graph& g, const std::string& name, int64_t num, int64_t dim, double stddev = 0.02,
            uint64_t seed = 0, DType dtype = DType::f32);
  Tensor forward(Graph& g, Tensor ids) override;
  Tensor table;
};

/// Zeroes elements with probability `rate` in training (scaling the rest by 1/(1-rate)); its
/// random state is a variable advanced by an update op, so every step draws a new mask.
class Dropout : public Module {
 public:
  Dropout(Graph& g, const std::string& name, double rate, uint64_t seed = 0);
  Tensor forward(Graph& g, Tensor x) override;
  double rate;
  Tensor state;
};

/// A module made from a function (activations, reshapes, pooling).
class Lambda : public Module {
 public:
  using Fn = std::function<Tensor(Graph&, Tensor)>;
  Lambda(std::string name, Fn fn) : Module(std::move(name)), fn_(std::move(fn)) {}
  Tensor forward(Graph& g, Tensor x) override { return fn_(g, x); }

 private:
  Fn fn_;
};

/// Children applied in order.
class Sequential : public Module {
 public:
  explicit Sequential(std::string name = "") : Module(std::move(name)) {}
  /// Appends a module; returns it.
  template <class M>
  std::shared_ptr<M> add(std::shared_ptr<M> m) {
    return add_child(std::move(m));
  }
  /// Appends a function module.
  void add(const std::string& name, Lambda::Fn fn) { add_child(std::make_shared<Lambda>(name, std::move(fn))); }
  Tensor forward(Graph& g, Tensor x) override;
  /// The name a new child at position `index` should take ("<name>.<index>").
  std::string name_of(size_t index) const { return child_name(std::to_string(index)); }
  std::string next_name() const { return name_of(children().size()); }
};

// ---- models ----------------------------------------------------------------------------------
/// Options of the ResNet builders (NHWC).
struct ResNetConfig {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  /// Channels of the first stage (64 in the paper); later stages double it.
  int64_t base_width = 64;
  /// Small images (CIFAR, MNIST): a 3x3 stride-1 stem and no max pool.
  bool small_input = false;
  uint64_t seed = 0;
  std::string name = "resnet";
};
/// ResNet-18 (basic blocks [2, 2, 2, 2]): NHWC images -> [N, num_classes] logits.
std::shared_ptr<Sequential> resnet18(Graph& g, const ResNetConfig& c = {});
/// ResNet-50 (bottleneck blocks [3, 4, 6, 3], expansion 4).
std::shared_ptr<Sequential> resnet50(Graph& g, const ResNetConfig& c = {});
/// Any ResNet: `bottleneck` picks the block, `blocks` the count per stage.
std::shared_ptr<Sequential> resnet(Graph& g, bool bottleneck, const std::vector<int64_t>& blocks,
                                   const ResNetConfig& c);

/// BERT encoder sizes (BERT-base by default).
struct BertConfig {
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  int64_t vocab = 30522;
  int64_t max_positions = 512;
  int64_t type_vocab = 2;
  double layer_norm_eps = 1e-12;
  /// Dropout on embeddings, attention output and FFN output (0: none).
  double dropout = 0.0;
  uint64_t seed = 0;
  std::string name = "bert";
};

/// BERT encoder: integer ids [B, L] -> sequence output [B, L, hidden]. L must be static.
class Bert : public Module {
 public:
  Bert(Graph& g, const BertConfig& c);
  /// forward(ids) with token types 0 and no padding mask.
  Tensor forward(Graph& g, Tensor ids) override;
  /// token_types: integer [B, L] (or empty); mask: bool [B, L], true for real tokens (or empty).
  Tensor forward(Graph& g, Tensor ids, Tensor token_types, Tensor mask);
  BertConfig config;

 private:
  struct Layer {
    std::shared_ptr<Linear> q, k, v, o, ffn_in, ffn_out;
    std::shared_ptr<LayerNorm> ln_attn, ln_ffn;
    std::shared_ptr<Dropout> drop_attn, drop_ffn;
  };
  std::shared_ptr<Embedding> words_, positions_, types_;
  std::shared_ptr<LayerNorm> ln_emb_;
  std::shared_ptr<Dropout> drop_emb_;
  std::vector<Layer> layers_;
};
/// A BERT encoder (BERT-base with the default config).
std::shared_ptr<Bert> bert_base(Graph& g, const BertConfig& c = {});

}  // namespace tg::nn
