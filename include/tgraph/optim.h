#pragma once
// Optimizers as graph ops: each call builds the update of every variable (and of its optimizer
// state, kept in variables so checkpoints hold it) and returns one Operation to pass as a
// target op of compile. Everything reads the values current at the start of the run, so the
// gradients and the updates of one run see the same weights.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tgraph/graph.h"

namespace tg::optim {

/// Gradients by variable, as Graph::gradients returns them.
using GradMap = std::unordered_map<Tensor, Tensor>;

/// One operation that runs every op of `ops` (a no-op carrying them as control dependencies).
Operation group(Graph& g, const std::vector<Operation>& ops);

/// SGD options (PyTorch semantics, dampening 0).
struct SgdOptions {
  double momentum = 0.0;
  bool nesterov = false;
  /// L2 penalty added to the gradient: g += weight_decay * w.
  double weight_decay = 0.0;
  /// When set (a bool scalar), the step changes nothing where it is false (skipped steps of
  /// dynamic loss scaling).
  std::optional<Tensor> apply_if;
};

/// One SGD step for every variable of `vars`; momentum buffers are variables "<var>/momentum".
/// `lr` is a scalar tensor (a placeholder lets a schedule feed it per step).
Operation sgd(Graph& g, const std::vector<Tensor>& vars, const GradMap& grads, Tensor lr,
              const SgdOptions& o = {});

/// Adam / AdamW options (PyTorch semantics).
struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  /// Adam: L2 added to the gradient; AdamW: decoupled, w -= lr * weight_decay * w.
  double weight_decay = 0.0;
  /// Prefix of the shared step counter variable "<name>/step" (i64 scalar).
  std::string name = "adam";
  std::optional<Tensor> apply_if;
};

/// One Adam step with bias correction; state variables "<var>/adam_m", "<var>/adam_v" and the
/// step counter "<name>/step".
Operation adam(Graph& g, const std::vector<Tensor>& vars, const GradMap& grads, Tensor lr,
               const AdamOptions& o = {});
/// AdamW: Adam with decoupled weight decay (default 0.01, step counter "adamw/step").
Operation adamw(Graph& g, const std::vector<Tensor>& vars, const GradMap& grads, Tensor lr,
                AdamOptions o = {.weight_decay = 0.01, .name = "adamw"});

/// sqrt of the sum of squares of every gradient (an f32 scalar).
Tensor global_norm(Graph& g, const GradMap& grads);
/// Scales every gradient by min(1, max_norm / global_norm); `norm_out` receives the norm.
GradMap clip_by_global_norm(Graph& g, const GradMap& grads, double max_norm,
                            Tensor* norm_out = nullptr);

// ---- learning-rate schedules (host side: compute, then feed the lr placeholder) ------------
/// Linear warm-up over `warmup` steps, then cosine decay from base to `final_lr` at `total`.
double cosine_lr(int64_t step, int64_t total, double base, int64_t warmup = 0, double final_lr = 0.0);
/// base * gamma^(step / step_size).
double step_lr(int64_t step, int64_t step_size, double base, double gamma = 0.1);

// ---- mixed precision -----------------------------------------------------------------------
/// Dynamic loss scaling (for f16 training): the loss is multiplied by a scale kept in the
/// variable "<name>/scale"; gradients are unscaled; when any is not finite the step must be
/// skipped (pass `finite` as apply_if) and the scale is halved, and after `growth_interval`
/// finite steps in a row it doubles.
struct LossScaleOptions {
  double initial_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  std::string name = "loss_scale";
};
/// What scaled_gradients builds.
struct ScaledGradients {
  GradMap grads;               // unscaled gradients, f32
  Tensor finite;               // bool scalar: every gradient is finite
  Tensor scale;                // the scale used in this run
  Operation update;            // updates the scale and the finite-step counter: add as target
};
/// Gradients of loss * scale with respect to vars, unscaled, with the scale's update.
ScaledGradients scaled_gradients(Graph& g, Tensor loss, const std::vector<Tensor>& vars,
                                 const LossScaleOptions& o = {});

}  // namespace tg::optim
