// cuDNN convolution: conv2d / conv3d forward, their data and weight gradients, and
// conv_transpose2d (the data gradient of the forward conv with the same descriptor and
// weights). f16 / bf16 (and f32 with TF32 allowed) run through cuDNN's graph API with a plan
// kept per problem (cudnn_conv_graph.h: the legacy calls cost 10-40x more on the host per call);
// exact f32, f64 and what the graph API declines through the legacy API of cuDNN 9, described
// below. Both take the operands this file prepares.
//
// Every op is described as the forward convolution x (*) w = y it belongs to:
//   conv*            (x, w) -> y      cudnnConvolutionForward
//   conv*_data_grad  (dy, w) -> dx    cudnnConvolutionBackwardData
//   conv_transpose2d (x, w) -> out    cudnnConvolutionBackwardData with y = x, x = out
//   conv*_weight_grad(dy, x) -> dw    cudnnConvolutionBackwardFilter
// cuDNN has one padding value per dim (the same before and after). Only the padding before a
// dim enters the arithmetic (input coordinate p*s + k*d - before; taps outside read 0); the
// padding after only decides how many outputs there are. So cuDNN is given `before` when its
// output extents with it equal the real ones. Otherwise (asymmetric padding: TensorFlow's
// `same` with an even window or a stride, explicit before != after) x is padded explicitly
// into a temporary (launch_pad, zeros) and cuDNN runs unpadded on it; a data gradient is
// computed for the padded x and its interior copied out.
//
// f64 computes in double (cuDNN's DOUBLE_CONFIG, scaling factors as doubles); configurations
// it has no algorithm for are declined.
//
// cuDNN wants the filter in the memory layout of the activations: KRSC for NHWC, KCRS for
// NCHW. Weights in another layout (hwio always; oihw with NHWC data) are permuted into a
// temporary buffer (and a weight gradient permuted back).
#include <cudnn.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <variant>

#include "backends/cpu/profile.h"
#include "backends/cuda/conv_choices.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cudnn_conv_graph.h"
#include "backends/cuda/cudnn_util.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/kernels_copy.h"
#include "backends/cuda/kernels_layout.h"
#include "backends/cuda/library_plans.h"
#include "backends/cuda/library_warmup.h"
#include "core/env.h"
#include "runtime/device_code.h"

namespace tg::detail {
using namespace conv_choices;
namespace {

enum class Dir { forward, data, filter };

template <class Perf, class Get, class Workspace>
Choice pick(cudnnConvolutionDescriptor_t conv, bool exact_f32, int max_count, Get get, Workspace workspace_of) {
  if (max_count < 1) max_count = 1;
  std::vector<Perf> perf(static_cast<size_t>(max_count));
  int returned = 0;
  cudnnStatus_t s = get(max_count, &returned, perf.data());
  if (cudnn_declines(s)) return {};
  cudnn_check(s, "cudnnGetConvolution*Algorithm_v7");
  for (int i = 0; i < returned && i < max_count; ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    // f32 must be exact: no TF32 / tensor-core conversions.
    if (exact_f32 && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    cudnnMathType_t math = exact_f32 ? CUDNN_FMA_MATH : p.mathType;
    if (cudnnSetConvolutionMathType(conv, math) != CUDNN_STATUS_SUCCESS) continue;
    size_t ws = 0;
    if (workspace_of(p.algo, &ws) != CUDNN_STATUS_SUCCESS) continue;
    if (ws > kMaxWorkspace) continue;
    return {true, static_cast<int>(p.algo), math, ws};
  }
  return {};
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += std::to_string(x) + ",";
  return s;
}

// Permutation taking weights in the op's layout to cuDNN's filter layout (out dim i reads in
// dim perm[i]); empty when they already agree. Weights are [k..., I, O] (spatial first) or
// [O, I, k...]; the filter is [O, k..., I] (channels-last data) or [O, I, k...].
std::vector<int> filter_perm(bool spatial_first, bool last, int nsp) {
  std::vector<int> p;
  if (spatial_first) {
    p.push_back(nsp + 1);  // O
    if (!last) p.push_back(nsp);  // I
    for (int i = 0; i < nsp; ++i) p.push_back(i);
    if (last) p.push_back(nsp);
  } else {
    if (!last) return {};
    p.push_back(0);
    for (int i = 0; i < nsp; ++i) p.push_back(2 + i);
    p.push_back(1);
  }
  return p;
}

}  // namespace

namespace {

// cudnn_conv, or with `cold` set only its question (cudnn_conv_cold: operands' pointers null,
// nothing launched, false returned).
bool conv_call(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
               cudaStream_t stream, int device, bool* cold) {
  Dir dir;
  int nsp = 2;
  const ConvDesc* d = nullptr;
  switch (n.kind) {
    case OpKind::Conv2d: case OpKind::Conv3d: case OpKind::ConvTranspose2d:
      d = std::get_if<ConvDesc>(&n.attr);
      dir = n.kind == OpKind::ConvTranspose2d ? Dir::data : Dir::forward;
      nsp = n.kind == OpKind::Conv3d ? 3 : 2;
      break;
    case OpKind::Conv2dDataGrad: case OpKind::Conv3dDataGrad: case OpKind::Conv2dWeightGrad:
    case OpKind::Conv3dWeightGrad: {
      const auto* gd = std::get_if<ConvGradDesc>(&n.attr);
      d = gd ? &gd->conv : nullptr;
      dir = (n.kind == OpKind::Conv2dDataGrad || n.kind == OpKind::Conv3dDataGrad) ? Dir::data : Dir::filter;
      nsp = (n.kind == OpKind::Conv3dDataGrad || n.kind == OpKind::Conv3dWeightGrad) ? 3 : 2;
      break;
    }
    default: return false;
  }
  if (!d || in.size() != 2 || out.size() != 1) return false;
  if (!cold && (!in[0].ptr || !in[1].ptr || !out[0].ptr)) return false;

  // The forward convolution's x, w, y.
  TensorType tx, tw, ty;
  switch (dir) {
    case Dir::forward: tx = in[0].type, tw = in[1].type, ty = out[0].type; break;
    case Dir::data: ty = in[0].type, tw = in[1].type, tx = out[0].type; break;
    case Dir::filter: ty = in[0].type, tx = in[1].type, tw = out[0].type; break;
  }
  const DType dt = tx.dtype;
  cudnnDataType_t cdt;
  if (tw.dtype != dt || ty.dtype != dt) return false;
  if (dt == DType::f64) cdt = CUDNN_DATA_DOUBLE;
  else if (!cudnn_dtype(dt, cdt)) return false;
  // f32 is exact (FMA math only) unless compiled with Precision::tf32, which lets cuDNN pick
  // tensor-op (TF32) algorithms. f16 / bf16 data (autocast) always computes in FLOAT (the
  // convolution descriptor below): products on tensor cores, fp32 accumulation.
  const bool exact_f32 = dt == DType::f32 && !g.allow_tf32;

  // Layouts, as ops/infer_conv.cpp accepts them.
  bool last, sfirst;
  if (d->data_layout == Layout::nhwc || (nsp == 3 && d->data_layout == Layout::ndhwc)) last = true;
  else if (d->data_layout == Layout::nchw || (nsp == 3 && d->data_layout == Layout::ncdhw)) last = false;
  else return false;
  if (d->weights_layout == Layout::hwio || (nsp == 3 && d->weights_layout == Layout::dhwio)) sfirst = true;
  else if (d->weights_layout == Layout::oihw || (nsp == 3 && d->weights_layout == Layout::oidhw)) sfirst = false;
  else return false;
  const int64_t rank = nsp + 2;
  if (tx.shape.rank() != rank || tw.shape.rank() != rank || ty.shape.rank() != rank) return false;
  if (!cudnn_dims_ok(tx.shape) || !cudnn_dims_ok(tw.shape) || !cudnn_dims_ok(ty.shape)) return false;
  if (dir == Dir::forward)
    for (int64_t v : d->output_padding)
      if (v != 0) return false;

  std::vector<int64_t> xd = nc_dims(tx.shape, last), yd = nc_dims(ty.shape, last);
  const auto& wdims = tw.shape.dims();
  int64_t wo, wi;
  std::vector<int64_t> k;
  if (sfirst) {
    wo = wdims[static_cast<size_t>(nsp + 1)];
    wi = wdims[static_cast<size_t>(nsp)];
    k.assign(wdims.begin(), wdims.begin() + nsp);
  } else {
    wo = wdims[0];
    wi = wdims[1];
    k.assign(wdims.begin() + 2, wdims.end());
  }
  const int64_t G = d->groups;
  if (G < 1 || G > INT_MAX) return false;
  if (xd[0] != yd[0] || xd[1] != wi * G || yd[1] != wo || wo % G != 0) return false;

  // Channel padding: cuDNN's tensor-core kernels for NHWC 16-bit data take the input channels
  // in multiples of 8; an image's 3 ran on a legacy kernel at a tenth of their rate (ResNet-50's
  // stem at batch 256: 1.55 ms forward, 0.89 ms weight gradient, bench/RESULTS.md). Zeros
  // appended to x's and w's channels add exact zeros to every sum. The forward and the weight
  // gradient only (the data gradient of an image is rarely wanted); TGRAPH_CUDNN_NO_CHANNEL_PAD=1
  // turns it off.
  int64_t cpad = 0;
  if (nsp == 2 && last && G == 1 && wi < 8 && dir != Dir::data && (dt == DType::bf16 || dt == DType::f16) &&
      !env_flag("TGRAPH_CUDNN_NO_CHANNEL_PAD"))
    cpad = 8 - wi;

  std::vector<int64_t> stride, dil, before, after;
  if (!ones_default(d->stride, static_cast<size_t>(nsp), stride)) return false;
  if (!ones_default(d->dilation, static_cast<size_t>(nsp), dil)) return false;
  std::vector<int64_t> xsp(xd.begin() + 2, xd.end()), ysp(yd.begin() + 2, yd.end());
  if (!pads(d->padding, d->explicit_padding, xsp, ysp, k, stride, dil, before, after)) return false;

  // Descriptors. With symmetric `before` padding first; when cuDNN's output extents with it
  // are not the real ones, x padded explicitly (xp, dims xpd) and no cuDNN padding.
  TensorDescriptor xdesc, ydesc;
  FilterDescriptor wdesc;
  ConvolutionDescriptor cdesc;
  if (!set_activation(ydesc.d, cdt, ty.shape, last)) return false;
  std::vector<int> fdims{static_cast<int>(wo), static_cast<int>(wi + cpad)};
  for (int64_t v : k) fdims.push_back(static_cast<int>(v));
  if (cudnnSetFilterNdDescriptor(wdesc.d, cdt, last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, static_cast<int>(rank),
                                 fdims.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  std::vector<int> stride_i = to_int(stride), dil_i = to_int(dil);
  const cudnnDataType_t compute = dt == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnMathType_t math0 =
      dt == DType::f64 ? CUDNN_DEFAULT_MATH : exact_f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  // Sets cdesc with padding `pad` and x's descriptor for shape xs; true when cuDNN's output
  // extents are the real ones.
  auto describe = [&](const std::vector<int64_t>& pad, const Shape& xs) {
    std::vector<int> pad_i = to_int(pad);
    if (!set_activation(xdesc.d, cdt, xs, last)) return false;
    if (cudnnSetConvolutionNdDescriptor(cdesc.d, nsp, pad_i.data(), stride_i.data(), dil_i.data(),
                                        CUDNN_CROSS_CORRELATION, compute) != CUDNN_STATUS_SUCCESS)
      return false;
    if (cudnnSetConvolutionGroupCount(cdesc.d, static_cast<int>(G)) != CUDNN_STATUS_SUCCESS) return false;
    if (cudnnSetConvolutionMathType(cdesc.d, math0) != CUDNN_STATUS_SUCCESS) return false;
    std::vector<int> odims(static_cast<size_t>(rank));
    if (cudnnGetConvolutionNdForwardOutputDim(cdesc.d, xdesc.d, wdesc.d, static_cast<int>(rank), odims.data()) !=
        CUDNN_STATUS_SUCCESS)
      return false;
    for (size_t i = 0; i < odims.size(); ++i)
      if (odims[i] != yd[i]) return false;
    return true;
  };
  // x's dims in memory order, with its channels padded (xc), and padded by before / after in
  // its spatial dims too (xpd).
  const std::vector<int64_t>& xdims = tx.shape.dims();
  std::vector<int64_t> xc = xdims;
  xc.back() += cpad;  // channels last whenever cpad > 0
  std::vector<int64_t> xpd = xc, xbefore(xdims.size(), 0);
  for (int i = 0; i < nsp; ++i) {
    const size_t m = static_cast<size_t>(last ? 1 + i : 2 + i);
    xpd[m] += before[static_cast<size_t>(i)] + after[static_cast<size_t>(i)];
    xbefore[m] = before[static_cast<size_t>(i)];
  }
  bool padded = false;
  if (!describe(before, Shape(xc))) {
    if (!cudnn_dims_ok(Shape(xpd)) || !describe(std::vector<int64_t>(static_cast<size_t>(nsp), 0), Shape(xpd)))
      return false;
    padded = true;
  }

  // Algorithm, cached per configuration: from cuDNN's heuristics, or with TGRAPH_CUDNN_FIND=1
  // measured by cuDNN's Find on the run's own buffers (the fastest that fits kMaxWorkspace;
  // never while the stream is being captured). On the H200, Find chose no faster algorithms
  // for ResNet-50's convolutions and cost seconds of the first step (bench/RESULTS.md).
  // The problem without the device (what a saved file holds: library_plans.h) is its family,
  // everything but the batch, then "|n<batch>" (so a saved key splits at its last "|n"): a
  // convolution met at another batch size reuses the algorithm
  // chosen at the nearest one within a factor of 4 (its workspace asked again) unless
  // TGRAPH_CUDNN_PER_BATCH=1. On the H200 the heuristic query costs 2-3 ms per bf16
  // convolution and a newly chosen algorithm's first run ~4 ms (its kernels loaded), against
  // ~0.5 ms for a known one at a new batch size (bench_library_plans): ResNet-50's first call
  // at a new batch size in ~50 ms instead of ~180.
  std::ostringstream fam;
  fam << int(dir) << '|' << int(dt) << '|' << exact_f32 << '|' << last << '|'
      << join(std::vector<int64_t>(xd.begin() + 1, xd.end())) << '|' << join(std::vector<int64_t>(yd.begin() + 1, yd.end()))
      << '|' << wo << ',' << wi << ',' << join(k) << '|' << join(before) << '|' << join(stride) << '|' << join(dil)
      << '|' << G << '|' << (padded ? join(after) : std::string("-")) << '|' << cpad;
  const std::string problem = fam.str() + "|n" + std::to_string(xd[0]);
  const std::string key = std::to_string(device) + '|' + problem, family = std::to_string(device) + '|' + fam.str();
  const std::string saved = library_signature(device) + "|conv|" + problem;
  // A convolution is cold when its call would ask cuDNN's heuristics, or run an algorithm no call
  // of its family has run in this process (its kernels not loaded yet): a first run makes it
  // ahead on a warm-up thread (library_warmup.h).
  const GraphConvKeys gkeys{key, family, problem, xd[0]};
  const bool graph_api = graph_conv_takes(dt, dt == DType::f32 && g.allow_tf32);
  // Whether another batch size's algorithm may serve a first run: not for operands larger than a
  // sixteenth of the free memory (the question put off runs on scratch operands of their sizes,
  // several at once).
  auto provisional_fits = [&] {
    size_t operands = 0, free_b = 0, total_b = 0;
    for (const DevArg& a : in) operands += static_cast<size_t>(a.type.shape.num_elements()) * dtype_size(a.type.dtype);
    for (const DevOut& o : out) operands += static_cast<size_t>(o.type.shape.num_elements()) * dtype_size(o.type.dtype);
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return operands <= free_b / 16;
  };
  // A first run took another batch size's algorithm this once: the question itself is asked
  // after the run, on a warm-up thread, by the same call on scratch operands (ProvisionalChoices).
  auto put_off_question = [&](ProvisionalChoices& later) {
    if (profiling_first_runs())
      cpu_profile_add("cuda first run: convolution: another batch size's algorithm (heuristics asked after the run)", 0.0);
    auto graph = std::make_shared<GraphImpl>();  // what conv_call reads of the graph: its tf32 flag
    graph->allow_tf32 = g.allow_tf32;
    std::vector<TensorType> ti, to;
    for (const DevArg& a : in) ti.push_back(a.type);
    for (const DevOut& o : out) to.push_back(o.type);
    later.put_off(key, [graph, node = n, ti, to, device, key](cudaStream_t s) {
      graph_conv_drop_provisional(key);  // (a graph-API plan taken provisionally)
      call_on_scratch(cudnn_conv, *graph, node, ti, to, s, device);
    });
  };
  if (cold && graph_api && !graph_conv_declined(gkeys)) {
    *cold = graph_conv_cold(gkeys, device, ProvisionalChoices::current() && provisional_fits());
    return false;
  }
  if (cold) {
    std::lock_guard<std::mutex> cl(cache_mutex());
    bool exact = false;
    const Choice c = known_choice(key, saved, family, xd[0], exact);
    *cold = !(exact || c.ok) || (c.ok && !ran().count(ran_key(family, c)));
    if (*cold && !exact && !c.ok && ProvisionalChoices::current() && !choices().no_reuse.count(key))
      *cold = !provisional_choice(family, xd[0]).ok;
    return false;
  }

  CudnnDevice& cd = cudnn_legacy_device(device);
  std::lock_guard<std::mutex> lock(cd.mu);
  cudnnHandle_t h = cd.handle;
  TG_CUDNN(cudnnSetStream(h, stream));

  const size_t esize = dtype_size(dt);
  const size_t wbytes = static_cast<size_t>(tw.shape.num_elements()) * esize;
  // Weights in cuDNN's filter layout: the op's own buffer, or a permuted copy.
  std::vector<int> perm = filter_perm(sfirst, last, nsp);
  // A permutation that only moves dims of size 1 (OIHW -> OHWI of a 1x1 filter) keeps every
  // element where it is: cuDNN reads (or writes) the weights' own buffer.
  if (!perm.empty() && cpad == 0) {
    int prev = -1;
    bool same_order = true;
    for (int p : perm)
      if (wdims[static_cast<size_t>(p)] != 1) {
        same_order &= p > prev;
        prev = p;
      }
    if (same_order) perm.clear();
  }
  DeviceBuffer wtmp, wpad;
  if (!perm.empty() && !(cpad > 0 && dir == Dir::filter)) wtmp = op_workspace(wbytes, stream, device);
  // The filter's dims (cuDNN's layout) and, with channel padding, its padded copy.
  std::vector<long long> fd, fdp;
  for (int v : fdims) fdp.push_back(v);
  if (last) std::rotate(fdp.begin() + 1, fdp.begin() + 2, fdp.end());  // [O, k..., I]
  fd = fdp;
  fd.back() -= cpad;
  if (cpad > 0) wpad = op_workspace(static_cast<size_t>(wo * (wi + cpad)) * esize * static_cast<size_t>(
                                        std::accumulate(k.begin(), k.end(), int64_t{1}, std::multiplies<>())),
                                    stream, device);
  // x padded explicitly: filled from the input (forward, filter), or written by cuDNN and its
  // interior copied to the output (data).
  DeviceBuffer xp;
  const void* xin = dir == Dir::forward ? in[0].ptr : dir == Dir::filter ? in[1].ptr : nullptr;
  void* xout = dir == Dir::data ? out[0].ptr : nullptr;
  if (padded || cpad > 0) {
    // Spatially padded (xpd, padding before xbefore), or with its channels padded only (xc).
    const std::vector<int64_t>& pd = padded ? xpd : xc;
    xp = op_workspace(static_cast<size_t>(Shape(pd).num_elements()) * esize, stream, device);
    if (dir != Dir::data) {
      std::vector<long long> id(xdims.begin(), xdims.end()), od(pd.begin(), pd.end()), bf(xdims.size(), 0);
      if (padded) bf.assign(xbefore.begin(), xbefore.end());
      TG_CUDA(launch_pad(xin, xp.get(), static_cast<int>(rank), id.data(), od.data(), bf.data(), PadKind::constant, 0,
                         static_cast<int>(esize), stream));
      xin = xp.get();
    } else {
      xout = xp.get();
    }
  }
  std::vector<long long> wd_ll(wdims.begin(), wdims.end());
  if (!perm.empty() && dir != Dir::filter)
    TG_CUDA(launch_permute(in[1].ptr, wtmp.get(), static_cast<int>(rank),
                           wd_ll.data(), perm.data(), static_cast<int>(esize), stream));
  if (cpad > 0 && dir != Dir::filter) {
    const std::vector<long long> zeros(fd.size(), 0);
    TG_CUDA(launch_pad(wtmp.get(), wpad.get(), static_cast<int>(rank), fd.data(), fdp.data(), zeros.data(),
                       PadKind::constant, 0, static_cast<int>(esize), stream));
  }
  const void* wptr = cpad > 0        ? static_cast<const void*>(wpad.get())
                     : perm.empty() ? (dir == Dir::filter ? nullptr : in[1].ptr)
                                    : static_cast<const void*>(wtmp.get());
  void* wout = dir != Dir::filter ? nullptr : cpad > 0 ? wpad.get() : perm.empty() ? out[0].ptr : wtmp.get();
  // What follows either path's call: dx out of the padded x's gradient, dw back to the weights'
  // layout.
  auto finish = [&] {
    if (dir == Dir::data && padded) {
      // dx is the interior of the padded x's gradient.
      StridedCopy cp;
      cp.rank = static_cast<int>(rank);
      long long st = 1;
      for (int64_t i = rank - 1; i >= 0; --i) {
        const size_t u = static_cast<size_t>(i);
        cp.dims[i] = xdims[u];
        cp.in_strides[i] = st;
        cp.in_offset += xbefore[u] * st;
        st *= xpd[u];
      }
      st = 1;
      for (int64_t i = rank - 1; i >= 0; --i) {
        cp.out_strides[i] = st;
        st *= xdims[static_cast<size_t>(i)];
      }
      TG_CUDA(launch_strided_copy(xp.get(), out[0].ptr, cp, static_cast<int>(esize), stream));
    }
    if (dir == Dir::filter && cpad > 0) {
      // wpad holds dw in filter layout with padded channels: its first wi channels, permuted
      // back to the weights' layout, in one strided copy.
      std::vector<long long> fst(fdp.size());
      long long st = 1;
      for (size_t i = fdp.size(); i-- > 0;) fst[i] = st, st *= fdp[i];
      StridedCopy cp;
      cp.rank = static_cast<int>(rank);
      st = 1;
      for (int64_t j = rank - 1; j >= 0; --j) {
        const size_t u = static_cast<size_t>(j);
        const size_t i = static_cast<size_t>(std::find(perm.begin(), perm.end(), static_cast<int>(j)) - perm.begin());
        cp.dims[j] = wd_ll[u];
        cp.in_strides[j] = fst[i];
        cp.out_strides[j] = st;
        st *= wd_ll[u];
      }
      TG_CUDA(launch_strided_copy(wpad.get(), out[0].ptr, cp, static_cast<int>(esize), stream));
    } else if (dir == Dir::filter && !perm.empty()) {
      // wtmp holds dw in filter layout, dims wdims permuted by perm; permute back.
      std::vector<int> inv(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int>(i);
      TG_CUDA(launch_permute(wtmp.get(), out[0].ptr, static_cast<int>(rank), fd.data(), inv.data(),
                             static_cast<int>(esize), stream));
    }
    return true;
  };

  // Half precision and TF32: cuDNN's graph API, a plan kept per problem (cudnn_conv_graph.h);
  // what it declines goes on through the legacy calls below.
  if (graph_api) {
    GraphConv gc;
    gc.dir = dir == Dir::forward ? 0 : dir == Dir::data ? 1 : 2;
    gc.dtype = dt;
    gc.channels_last = last;
    gc.x = padded ? nc_dims(Shape(xpd), last) : cpad > 0 ? nc_dims(Shape(xc), last) : xd;
    gc.w = {wo, wi + cpad};
    gc.w.insert(gc.w.end(), k.begin(), k.end());
    gc.y = yd;
    gc.pad = padded ? std::vector<int64_t>(static_cast<size_t>(nsp), 0) : before;
    gc.stride = stride;
    gc.dil = dil;
    void* gx = dir == Dir::data ? xout : const_cast<void*>(xin);
    void* gw = dir == Dir::filter ? wout : const_cast<void*>(wptr);
    void* gy = dir == Dir::forward ? out[0].ptr : const_cast<void*>(in[0].ptr);
    ProvisionalChoices* later = ProvisionalChoices::current();
    bool provisional = false;
    if (graph_conv_run(gc, gkeys, h, stream, device, gx, gw, gy, later && provisional_fits(), &provisional)) {
      if (provisional && later) put_off_question(*later);
      return finish();
    }
  }

  // The workspace `algo` needs for this problem (a reused or queried choice).
  auto workspace_of = [&](int algo, size_t* ws) {
    switch (dir) {
      case Dir::forward:
        return cudnnGetConvolutionForwardWorkspaceSize(h, xdesc.d, wdesc.d, cdesc.d, ydesc.d,
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws);
      case Dir::data:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, wdesc.d, ydesc.d, cdesc.d, xdesc.d,
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws);
      case Dir::filter:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xdesc.d, ydesc.d, cdesc.d, wdesc.d,
                                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws);
    }
    return CUDNN_STATUS_NOT_SUPPORTED;
  };
  auto workspace_typed = [&](auto algo, size_t* ws) { return workspace_of(static_cast<int>(algo), ws); };
  Choice choice, known;
  bool cached = false;
  {
    std::lock_guard<std::mutex> cl(cache_mutex());
    known = known_choice(key, saved, family, xd[0], cached);
    if (cached) choice = known;
  }
  if (!cached) {  // another batch size's choice, its workspace asked for this one
    size_t ws = 0;
    if (known.ok && cudnnSetConvolutionMathType(cdesc.d, known.math) == CUDNN_STATUS_SUCCESS) {
      if (workspace_of(known.algo, &ws) == CUDNN_STATUS_SUCCESS && ws <= kMaxWorkspace) {
        choice = Choice{true, known.algo, known.math, ws};
        cached = true;
        std::lock_guard<std::mutex> cl(cache_mutex());
        cache()[key] = choice;
      }
    }
  }
  // A first run's provisional choice: another batch size's algorithm whose kernels are loaded,
  // this once; the call is made again after the run on a warm-up thread, on scratch operands of
  // its sizes, where it asks the heuristics and files their choice (loading its kernels for the
  // capture that follows: ProvisionalChoices, library_warmup.h). Not for operands larger than a
  // sixteenth of the free memory (several such calls run at once): those ask now.
  bool provisional = false;
  ProvisionalChoices* later = ProvisionalChoices::current();
  if (!cached && later) {
    // Never into a graph being captured (a caller capturing the run's stream): that graph
    // would keep the provisional choice.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
      cudaGetLastError();
      capturing = cudaStreamCaptureStatusActive;
    }
    Choice any;
    if (capturing == cudaStreamCaptureStatusNone) {
      std::lock_guard<std::mutex> cl(cache_mutex());
      if (!choices().no_reuse.count(key)) any = provisional_choice(family, xd[0]);
    }
    size_t ws = 0;
    if (any.ok && provisional_fits() && cudnnSetConvolutionMathType(cdesc.d, any.math) == CUDNN_STATUS_SUCCESS &&
        workspace_of(any.algo, &ws) == CUDNN_STATUS_SUCCESS && ws <= kMaxWorkspace) {
      choice = Choice{true, any.algo, any.math, ws};
      cached = provisional = true;
      put_off_question(*later);
    }
  }
  bool asked = false;  // the heuristics (or Find) chose it in this call
  if (!cached) {
    asked = true;
    std::optional<CpuProfileScope> timed;
    if (profiling_first_runs()) timed.emplace("cuda first run: convolution: cuDNN heuristics asked");
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TG_CUDA(cudaStreamIsCapturing(stream, &capture));
    const bool want_find = env_flag("TGRAPH_CUDNN_FIND"), find = want_find && capture == cudaStreamCaptureStatusNone;
    DeviceBuffer find_ws;
    size_t find_bytes = 0;
    if (find) {
      size_t free_b = 0, total_b = 0;
      TG_CUDA(cudaMemGetInfo(&free_b, &total_b));
      find_bytes = std::min(kMaxWorkspace, free_b / 4);
      find_ws = DeviceContext::get(device).allocate(find_bytes, stream);
    }
    int count = 0;
    switch (dir) {
      case Dir::forward:
        TG_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
        choice = pick<cudnnConvolutionFwdAlgoPerf_t>(
            cdesc.d, exact_f32, count,
            [&](int c, int* r, cudnnConvolutionFwdAlgoPerf_t* p) {
              return find ? cudnnFindConvolutionForwardAlgorithmEx(h, xdesc.d, xin, wdesc.d, wptr, cdesc.d, ydesc.d,
                                                                   out[0].ptr, c, r, p, find_ws.get(), find_bytes)
                          : cudnnGetConvolutionForwardAlgorithm_v7(h, xdesc.d, wdesc.d, cdesc.d, ydesc.d, c, r, p);
            },
            workspace_typed);
        break;
      case Dir::data:
        TG_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
        choice = pick<cudnnConvolutionBwdDataAlgoPerf_t>(
            cdesc.d, exact_f32, count,
            [&](int c, int* r, cudnnConvolutionBwdDataAlgoPerf_t* p) {
              return find ? cudnnFindConvolutionBackwardDataAlgorithmEx(h, wdesc.d, wptr, ydesc.d, in[0].ptr, cdesc.d,
                                                                        xdesc.d, xout, c, r, p, find_ws.get(),
                                                                        find_bytes)
                          : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wdesc.d, ydesc.d, cdesc.d, xdesc.d, c, r, p);
            },
            workspace_typed);
        break;
      case Dir::filter:
        TG_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
        choice = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
            cdesc.d, exact_f32, count,
            [&](int c, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
              return find ? cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xdesc.d, xin, ydesc.d, in[0].ptr, cdesc.d,
                                                                          wdesc.d, wout, c, r, p, find_ws.get(),
                                                                          find_bytes)
                          : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xdesc.d, ydesc.d, cdesc.d, wdesc.d, c, r, p);
            },
            workspace_typed);
        break;
    }
    if (find || !want_find || !choice.ok) {  // under Find, a pick made while capturing is not kept
      {
        std::lock_guard<std::mutex> cl(cache_mutex());
        cache()[key] = choice;
        if (choice.ok) families()[family][xd[0]] = choice;
      }
      if (choice.ok) library_choice_to_disk(disk_key(saved), choice_text(choice));
    }
  }
  if (!choice.ok) return false;
  if (current_device_code() && !provisional) record_library_plan(saved, choice_text(choice));
  TG_CUDNN(cudnnSetConvolutionMathType(cdesc.d, choice.math));

  DeviceBuffer ws;
  if (choice.workspace > 0) ws = op_workspace(choice.workspace, stream, device);
  // Scaling factors are doubles for double data, floats otherwise.
  const float onef = 1.0f, zerof = 0.0f;
  const double oned = 1.0, zerod = 0.0;
  const void* one = dt == DType::f64 ? static_cast<const void*>(&oned) : &onef;
  const void* zero = dt == DType::f64 ? static_cast<const void*>(&zerod) : &zerof;
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  switch (dir) {
    case Dir::forward:
      s = cudnnConvolutionForward(h, one, xdesc.d, xin, wdesc.d, wptr, cdesc.d,
                                  static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), ws.get(), choice.workspace,
                                  zero, ydesc.d, out[0].ptr);
      break;
    case Dir::data:
      s = cudnnConvolutionBackwardData(h, one, wdesc.d, wptr, ydesc.d, in[0].ptr, cdesc.d,
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo), ws.get(),
                                       choice.workspace, zero, xdesc.d, xout);
      break;
    case Dir::filter:
      s = cudnnConvolutionBackwardFilter(h, one, xdesc.d, xin, ydesc.d, in[0].ptr, cdesc.d,
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algo), ws.get(),
                                         choice.workspace, zero, wdesc.d, wout);
      break;
  }
  if (cudnn_declines(s)) {
    // Nothing was written to the output: let the caller fall back. A choice the heuristics made
    // is remembered as declined; a reused one (disk, another batch size) is forgotten and the
    // heuristics asked next time; a provisional one is answered after the run anyway.
    std::lock_guard<std::mutex> cl(cache_mutex());
    if (asked) {
      cache()[key] = Choice{};
    } else {  // reused or provisional: not this problem's, nor (for its size) its family's
      if (!provisional) cache().erase(key);
      choices().no_reuse.insert(key);
      auto f = families().find(family);
      if (f != families().end()) {
        auto b = f->second.find(xd[0]);
        if (b != f->second.end() && b->second.algo == choice.algo && b->second.math == choice.math) f->second.erase(b);
      }
    }
    return false;
  }
  cudnn_check(s, "cudnnConvolution (forward / backward)");
  {
    std::lock_guard<std::mutex> cl(cache_mutex());
    ran().insert(ran_key(family, choice));
  }
  return finish();
}

}  // namespace

bool cudnn_conv(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                cudaStream_t stream, int device) {
  return conv_call(g, n, in, out, stream, device, nullptr);
}

bool cudnn_conv_cold(const GraphImpl& g, const Node& n, const std::vector<TensorType>& in,
                     const std::vector<TensorType>& out, int device) {
  std::vector<DevArg> a;
  std::vector<DevOut> o;
  for (const TensorType& t : in) a.push_back(DevArg{nullptr, t});
  for (const TensorType& t : out) o.push_back(DevOut{nullptr, t});
  bool cold = false;
  conv_call(g, n, a, o, nullptr, device, &cold);
  return cold;
}

// A choice saved with an executable (choice_text), for this process's cache; a malformed one is
// ignored (the heuristics are asked instead).
void cudnn_conv_provide(const std::string& problem, const std::string& value, int device) {
  const Choice choice = parse_choice(value);
  if (!choice.ok) return;
  std::lock_guard<std::mutex> cl(cache_mutex());
  adopt(std::to_string(device) + '|' + problem, choice);
}

}  // namespace tg::detail
