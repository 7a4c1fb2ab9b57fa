// Jacobi iteration for A x = b as a while_loop that runs on the device until the residual
// norm, computed in the graph, falls below a tolerance (or an iteration cap is reached): the
// host only sees the answer. A is a strictly diagonally dominant n x n matrix, so Jacobi
// converges; the solution is then checked on the host with ||A x - b|| in double precision.
//
//   x_{k+1} = (b - R x_k) / d,   d = diag(A),  R = A - diag(d)
//
// usage: jacobi_while_loop [--device cpu|cuda|best] [--n N] [--tol T] [--max-iters K] [--repeat R]
// The time printed is the median of R runs after a warm-up run (host wall clock, inputs copied
// in and the answer copied out: what a user of Executable::run sees).
#include <tgraph/tgraph.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using Ts = std::vector<tg::Tensor>;

int main(int argc, char** argv) {
  std::string device = "best";
  int64_t n = 512, max_iters = 500, repeat = 1;
  double tol = 1e-4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device"))
      device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--n"))
      n = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--tol"))
      tol = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-iters"))
      max_iters = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeat"))
      repeat = std::max<int64_t>(1, std::atoll(argv[i + 1]));
  }
  tg::Device dev = device == "cpu"    ? tg::Device::cpu()
                   : device == "cuda" ? tg::Device::cuda(0)
                                      : tg::Device::best();
  std::printf("Jacobi iteration, n = %lld, tolerance %.1e, cap %lld iterations, on %s\n",
              static_cast<long long>(n), tol, static_cast<long long>(max_iters), dev.describe().c_str());

  // Off-diagonal entries in [0, 1), diagonal = 1.25 * (row sum of the off-diagonal): the
  // iteration matrix is non-negative with row sums 0.8, so the error shrinks by about 0.8 a
  // step and the loop runs a few dozen times. The entries come from a fixed formula rather
  // than a random generator so that bench/jacobi_torch.py solves exactly the same system.
  tg::TensorData a = tg::TensorData::zeros({n, n});
  tg::TensorData b = tg::TensorData::zeros({n, 1});
  for (int64_t i = 0; i < n; ++i) {
    double off = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (j == i) continue;
      double v = static_cast<double>((i * 7919 + j * 104729) % 1000) / 1000.0;
      a.set(i * n + j, v);
      off += v;
    }
    a.set(i * n + i, 1.25 * off);
    b.set(i, static_cast<double>((i * 31337) % 2000) / 1000.0 - 1.0);
  }

  tg::Graph g;
  tg::Tensor A = g.placeholder({n, n}, tg::f32, "A");
  tg::Tensor B = g.placeholder({n, 1}, tg::f32, "b");
  tg::TensorData identity = tg::TensorData::zeros({n, n});
  for (int64_t i = 0; i < n; ++i) identity.set(i * n + i, 1.0);
  tg::Tensor eye = g.constant(identity);
  tg::Tensor d = g.reduce_sum(g.mul(A, eye), {1}, true);  // [n, 1]
  tg::Tensor R = g.sub(A, g.mul(A, eye));
  tg::Tensor b_norm = g.sqrt(g.reduce_sum(g.square(B)));
  tg::Tensor limit = g.mul(g.scalar(tol), b_norm);  // relative tolerance
  tg::Tensor cap = g.scalar(static_cast<double>(max_iters), tg::i32);

  // Carried: x, the iteration count, the residual norm of x. `before` decides on the device
  // whether to go on; `after` takes one Jacobi step and measures the new residual.
  auto residual = [&](tg::Graph& s, tg::Tensor x) {
    return s.sqrt(s.reduce_sum(s.square(s.sub(s.matmul(A, x), B))));
  };
  tg::Tensor x0 = g.constant(tg::TensorData::zeros({n, 1}));
  Ts out = g.while_loop(
      {x0, g.scalar(0, tg::i32), b_norm},
      [&](tg::Graph& s, Ts v) {
        tg::Tensor go = s.logical_and(s.greater(v[2], limit), s.less(v[1], cap));
        return std::pair{go, v};
      },
      [&](tg::Graph& s, Ts v) {
        tg::Tensor x = s.div(s.sub(B, s.matmul(R, v[0])), d);
        return Ts{x, s.add(v[1], s.scalar(1, tg::i32)), residual(s, x)};
      });

  tg::Executable exe = g.compile({{A, A.type()}, {B, B.type()}}, out, {}, {.device = dev});
  exe.run({a, b});  // warm-up: kernels and plans are made on the first run
  std::vector<tg::TensorData> r;
  std::vector<double> times;
  for (int64_t k = 0; k < repeat; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    r = exe.run({a, b});
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  double ms = times[times.size() / 2];
  // The same solve with the inputs already on the device and the answer left there
  // (Executable::run_device): the loop alone, what the PyTorch peer's loop time compares with.
  double device_ms = 0;
  if (dev.kind == tg::Device::Kind::cuda) {
    std::vector<tg::DeviceTensor> din = {tg::DeviceTensor::from_host(a, dev), tg::DeviceTensor::from_host(b, dev)};
    exe.run_device(din);
    std::vector<double> dt;
    for (int64_t k = 0; k < repeat; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<tg::DeviceTensor> dout = exe.run_device(din);
      (void)dout[1].to_host();  // the iteration count: waits for the loop to finish
      dt.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(dt.begin(), dt.begin() + dt.size() / 2, dt.end());
    device_ms = dt[dt.size() / 2];
  }
  int64_t iters = static_cast<int64_t>(r[1].at(0));
  double graph_res = r[2].at(0);

  // Independent check in double precision on the host.
  double res2 = 0, bn2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    double s = -b.at(i);
    for (int64_t j = 0; j < n; ++j) s += a.at(i * n + j) * r[0].at(j);
    res2 += s * s;
    bn2 += b.at(i) * b.at(i);
  }
  double rel = std::sqrt(res2 / bn2);
  std::printf("iterations %lld, residual in the graph %.3e (relative %.3e), %.3f ms (median of %lld), %.2f us/iter\n",
              static_cast<long long>(iters), graph_res, graph_res / std::sqrt(bn2), ms,
              static_cast<long long>(repeat), iters > 0 ? 1000.0 * ms / static_cast<double>(iters) : 0.0);
  if (device_ms > 0)
    std::printf("inputs on the device (run_device): %.3f ms (median of %lld), %.2f us/iter\n", device_ms,
                static_cast<long long>(repeat), iters > 0 ? 1000.0 * device_ms / static_cast<double>(iters) : 0.0);
  bool ok = iters > 0 && iters < max_iters && rel < 2 * tol;
  std::printf("host check: ||A x - b|| / ||b|| = %.3e: %s\n", rel, ok ? "converged" : "FAILED");
  return ok ? 0 : 1;
}
