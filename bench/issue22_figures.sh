#!/usr/bin/env bash
# Every figure issue 22 names, on the GPU machine, into one log ($OUT/issue22-<part>.txt), in two
# parts that each fit a device call with the build (~4-6 min each):
#   TG_PY=1 TG_EXTRA="tgraph_gpu_tests bench_gpu" OUT=$OUT scripts/device-train.sh 'OUT=$OUT bench/issue22_figures.sh tests'
#   ... 'OUT=$OUT bench/issue22_figures.sh figures'
# (device-train.sh builds bench_train_resnet, the GPU tests and the Python module first).
# "tests": CUDA's start step by step, the GPU tests of the issue's code and attention three ways
# (cuDNN, tgraph's stand-in kernel, decomposed; a cold shape's first call); "figures": new
# sizes' first calls (ResNet-50, BERT), loads and first runs (BERT .tgx, ResNet-50 training).
# Caches: fresh TGRAPH_CACHE_DIR / CUDA_CACHE_PATH per part, so "cold" means a machine that
# never compiled these shapes; "warm" parts reuse the part's own cache in a second process.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
PART=${1:-tests}
LOG=$OUT/issue22-$PART.txt
export PYTHONPATH=$PWD/build-gpu/python:$PWD/bench
fresh() { export TGRAPH_CACHE_DIR=$OUT/cache_$1 CUDA_CACHE_PATH=$OUT/cudacache_$1; rm -rf "$TGRAPH_CACHE_DIR" "$CUDA_CACHE_PATH"; }
part() { echo; echo "=== $* ($(date +%T))"; }
# The GPU tests matching $1 (failures in full), then test_cuda.py.
gpu_# A ResNet-50 bf16 training step at batch 128 saved, then loaded and first-run in two fresh
# processes with an empty kernel cache (the last $1 lines of each run).
loaded_training() {
  part "ResNet-50 bf16 training step, batch 128: saved, then loaded and first-run in two fresh processes"
  fresh train
  timeout 120 build-gpu/bench/bench_train_resnet --batch 128 --iters 3 --warmup 1 --save "$OUT/rn.tgx" 2>&1 | tail -"$1"
  rm -rf "$TGRAPH_CACHE_DIR"
  for i in 1 2; do timeout 60 build-gpu/bench/bench_train_resnet --batch 128 --iters 3 --warmup 1 --load "$OUT/rn.tgx" 2>&1 | tail -"$1"; done
  rm -f "$OUT/rn.tgx"
}
tests() {
  timeout 240 build-gpu/tests/tgraph_gpu_tests --gtest_filter="$1" 2>&1 |
    grep -E "^\[  (PASSED|FAILED)|Failure|FAILED TEST|tests ran|Expected|Which is|actual|at [0-9]" | head -40
  (cd build-gpu && timeout 200 python3 -m pytest -q -x -p no:cacheprovider ../tests/python/test_cuda.py 2>&1 | tail -4)
}
# A BERT-base f16 .tgx loaded and first-run in a fresh process (profiled in another), with
# TGRAPH_INTERIM_MATMUL=$1 ("": unset, the default).
loaded_bert() {
  part "BERT-base f16 .tgx loaded and first-run in a fresh process, TGRAPH_INTERIM_MATMUL=${1:-unset}"
  fresh "load_m${1:-d}"
  env ${1:+TGRAPH_INTERIM_MATMUL=$1} timeout 170 python3 bench/compile_cache.py --device cuda --model bert --precision f16 --profile-load 2>&1 |
    grep -E "alone|cuda run|cuda first run: (matmul|constants|library)|load: backend"
}
tests() {
  part "CUDA's start, step by step (three fresh processes, then two that import torch first)"
  for a in "" "" "" torch torch; do python3 bench/cuda_start.py $a; done

  part "GPU tests: library plans, attention, convolutions, executor; then test_cuda.py"
  fresh tests
  gpu_tests 'CudaAttention.*:CudaLibraryPlans.*:Cudnn*:CudaExecutor*:CudaShared*:Nccl*'

  part "Attention at BERT's shapes: cuDNN, tgraph's kernel (the stand-in), decomposed; a cold shape's first call"
  fresh attention
  timeout 120 build-gpu/bench/bench_gpu attention 2>&1 | tail -20
}

figures() {
  part "ResNet-50 f16 new sizes' first calls: cold machine, then a second process (profiled, then timed)"
  fresh rn
  for i in 1 2; do
    echo "-- process $i (TGRAPH_PROFILE=first)"
    TGRAPH_PROFILE=first timeout 150 python3 bench/dynamic_sizes.py --model resnet50 --first-calls \
      --sizes 32x224,64x224,1x224,7x224,256x224 2>&1 | grep -E "^\| |heuristics|another batch|disk cache|made ahead|copy compiled"
  done
  fresh rn_timed
  echo "-- unprofiled, cold"
  timeout 150 python3 bench/dynamic_sizes.py --model resnet50 --first-calls --sizes 32x224,64x224,1x224,7x224,256x224 2>&1 | grep -E "^\| "

  part "BERT-base f16 new sizes' first calls: cold machine, then a second process; then cold, no stand-in"
  fresh bert
  for i in 1 2; do
    echo "-- process $i"
    timeout 150 python3 bench/dynamic_sizes.py --first-calls --sizes 16x16,16x128,1x128,16x512,4x64 2>&1 | grep -E "^\| "
  done
  fresh bert_wait
  echo "-- cold, TGRAPH_NO_INTERIM_ATTENTION=1 (each cold length's first call waits for cuDNN's plan)"
  TGRAPH_NO_INTERIM_ATTENTION=1 timeout 150 python3 bench/dynamic_sizes.py --first-calls --sizes 16x16,16x128,1x128,16x512,4x64 2>&1 | grep -E "^\| "

  part "BERT-base f16 .tgx loaded and first-run in a fresh process"
  fresh load
  timeout 170 python3 bench/compile_cache.py --device cuda --model bert --precision f16 --profile-load 2>&1 | head -30

  loaded_training 3
}

# "matmul": the experiment TGRAPH_INTERIM_MATMUL=1 (tgraph's matmul standing in for cuBLASLt
# kernels not yet loaded in a first run): its GPU tests and those its first runs touch, what a
# cuBLASLt kernel's first launch costs (through torch), and a loaded BERT's first run, the case
# it is for, without and with it (cold sizes: measured no gain in session 35).
matmul() {
  part "GPU tests: the matmul stand-in and what it touches; then test_cuda.py"
  fresh mtests
  gpu_tests 'CudaMatmulStandIn.*:CudaAttention.*:CudaLibraryPlans.*:Cudnn*:CudaExecutor*:CudaShared*:CudaMatmulEpilogue*:DeviceTensorGpu*:GraphMemoryGpu*:Nccl*'

  part "A cuBLASLt kernel's first launch in a process (through torch), against its second"
  python3 bench/cuda_start.py torch matmuls | grep -E "first matmul|total"

  for sw in 0 1; do loaded_bert $sw; done
}

# "sizes" (session 36): a dynamic executable's neighbouring size classes compiled ahead
# (runtime/size_classes.h) and the matmul stand-in on for loaded first runs by default: their GPU
# tests, then BERT-base f16's new sizes' first calls (cold, a second process, cold without the
# prefetch) and cold 1 x 128 profiled. "sizes2": ResNet-50's new sizes, the loaded BERT's first
# run with the defaults and with TGRAPH_INTERIM_MATMUL=0.
BERT_SIZES=16x16,16x128,1x128,16x512,4x64
sizes() {
  part "GPU tests: sizes prepared ahead, the matmul stand-in, the executor, attention, library plans; test_cuda.py"
  fresh stests
  gpu_tests 'CudaSizeClasses.*:CudaMatmulStandIn.*:CudaExecutor*:CudaAttention.*:CudaLibraryPlans.*:CudaShared*'

  part "BERT-base f16 new sizes' first calls: cold, a second process, then cold with TGRAPH_NO_SIZE_PREFETCH=1"
  fresh bert
  for i in 1 2; do
    echo "-- process $i"
    timeout 100 python3 bench/dynamic_sizes.py --first-calls --sizes $BERT_SIZES 2>&1 | grep -E "^\| "
  done
  fresh bert_off
  echo "-- cold, TGRAPH_NO_SIZE_PREFETCH=1"
  TGRAPH_NO_SIZE_PREFETCH=1 timeout 100 python3 bench/dynamic_sizes.py --first-calls --sizes $BERT_SIZES 2>&1 | grep -E "^\| "
  part "BERT-base f16 cold 16 x 16 then 1 x 128, profiled (TGRAPH_PROFILE=first)"
  fresh bert_prof
  TGRAPH_PROFILE=first timeout 100 python3 bench/dynamic_sizes.py --first-calls --sizes 16x16,1x128 2>&1 |
    grep -E "^\| |generated elementwise|broadcast_to|copy compiled|matmul"
}

sizes2() {
  part "ResNet-50 f16 new sizes' first calls: cold, then a second process"
  fresh rn
  for i in 1 2; do
    echo "-- process $i"
    timeout 150 python3 bench/dynamic_sizes.py --model resnet50 --first-calls --sizes 32x224,64x224,1x224,7x224,256x224 2>&1 | grep -E "^\| "
  done
  for sw in "" 0; do loaded_bert "$sw"; done
}

# "one": the figures of "sizes" and "sizes2" that one device call holds (~5 min with the build).
one() {
  part "GPU tests: sizes prepared ahead, the matmul stand-in, the executor; test_cuda.py"
  fresh otests
  gpu_tests 'CudaSizeClasses.*:CudaMatmulStandIn.*:CudaExecutor*:CudaShared*'
  part "BERT-base f16 new sizes' first calls: cold, then cold with TGRAPH_NO_SIZE_PREFETCH=1"
  fresh bert
  timeout 100 python3 bench/dynamic_sizes.py --first-calls --sizes $BERT_SIZES 2>&1 | grep -E "^\| "
  fresh bert_off
  TGRAPH_NO_SIZE_PREFETCH=1 timeout 100 python3 bench/dynamic_sizes.py --first-calls --sizes $BERT_SIZES 2>&1 | grep -E "^\| "
  part "ResNet-50 f16 new sizes' first calls, cold"
  fresh rn
  timeout 150 python3 bench/dynamic_sizes.py --model resnet50 --first-calls --sizes 32x224,64x224,1x224,7x224,256x224 2>&1 | grep -E "^\| "
  loaded_bert ""
}

# "final": the GPU tests of the session's changes and BERT's new sizes' first calls (~2 min).
final() {
  part "GPU tests: sizes prepared ahead, the matmul stand-in, the executor; test_cuda.py's loads"
  fresh ftests
  timeout 150 build-gpu/tests/tgraph_gpu_tests --gtest_filter='CudaSizeClasses.*:CudaMatmulStandIn.*:CudaExecutor*' 2>&1 |
    grep -E "^\[  (PASSED|FAILED)|Failure|FAILED TEST|Expected|Which is|actual" | head -30
  (cd build-gpu && timeout 100 python3 -m pytest -q -x -p no:cacheprovider ../tests/python/test_cuda.py -k "saved or attention_at_several" 2>&1 | tail -3)
  part "BERT-base f16 new sizes' first calls, cold"
  fresh bert
  timeout 100 python3 bench/dynamic_sizes.py --first-calls --sizes $BERT_SIZES 2>&1 | grep -E "^\| "
}

# "alltests": every GPU test and test_cuda.py (session 37 changed passes every CUDA compile runs:
# rewrite_nodes, autocast's weight casts), failures in full (~5 min after the build).
alltests() {
  part "All GPU tests, then test_cuda.py"
  fresh atests
  timeout 420 build-gpu/tests/tgraph_gpu_tests 2>&1 |
    grep -E "^\[  (PASSED|FAILED)|Failure|FAILED TEST|tests ran|Expected|Which is|actual|at [0-9]" | head -60
  (cd build-gpu && timeout 150 python3 -m pytest -q -x -p no:cacheprovider ../tests/python/test_cuda.py 2>&1 | tail -4)
}

# "graphconv" (session 41): half-precision convolutions through cuDNN's graph API with kept
# plans (backends/cuda/cudnn_conv_graph.h): their GPU tests and those of what they touch, then
# ResNet-50's new sizes' first calls with them and with the legacy calls
# (TGRAPH_CUDNN_LEGACY=1), each cold, then profiled. "graphconv2": the steady state the same two
# ways (a dynamic executable, per-size ones, eager) and the bf16 training step, C++ API.
RN_SIZES=32x224,64x224,1x224,7x224,256x224
graphconv() {
  part "GPU tests: the graph API's convolutions, cuDNN, library plans, size classes, executor"
  fresh gtests
  timeout 240 build-gpu/tests/tgraph_gpu_tests --gtest_filter='CudnnGraph.*:Cudnn.*:CudaLibraryPlans.*:CudaSizeClasses.*:CudaExecutor*' 2>&1 |
    grep -E "^\[  (PASSED|FAILED)|Failure|FAILED TEST|tests ran|Expected|Which is|actual|at [0-9]|against|graph API" | head -50
  for legacy in "" 1; do
    part "ResNet-50 f16 new sizes' first calls, cold, TGRAPH_CUDNN_LEGACY=${legacy:-unset}"
    fresh "rn$legacy"
    env ${legacy:+TGRAPH_CUDNN_LEGACY=1} timeout 100 python3 bench/dynamic_sizes.py --model resnet50 --first-calls \
      --sizes $RN_SIZES 2>&1 | grep -E "^\| "
  done
  part "ResNet-50 f16 cold, profiled (TGRAPH_PROFILE=first)"
  fresh rnp
  TGRAPH_PROFILE=first timeout 100 python3 bench/dynamic_sizes.py --model resnet50 --first-calls --sizes $RN_SIZES 2>&1 |
    grep -E "^\| |first call|new size|cuda first run|compile: (fold|channels|constant)" | head -60
}
graphconv2() {
  for legacy in "" 1; do
    part "ResNet-50 f16 steady (dynamic, per size, eager), TGRAPH_CUDNN_LEGACY=${legacy:-unset}"
    fresh "st$legacy"
    env ${legacy:+TGRAPH_CUDNN_LEGACY=1} timeout 170 python3 bench/dynamic_sizes.py --model resnet50 --batches 1,7,64,256 --seqs 224 2>&1 | tail -8
    part "ResNet-50 bf16 training step, batch 256, C++ API, TGRAPH_CUDNN_LEGACY=${legacy:-unset}"
    env ${legacy:+TGRAPH_CUDNN_LEGACY=1} timeout 120 build-gpu/bench/bench_train_resnet --batch 256 --iters 20 --warmup 3 2>&1 | tail -3
  done
  part "PyTorch eager's training step beside it (train_models.py, eager and the C++ row)"
  timeout 200 python3 bench/train_models.py --paths eager,cpp --configs bf16:256 --curve 0 2>&1 | tail -8
}

# "loads" (session 41): a BERT-base f16 .tgx and a ResNet-50 bf16 training step loaded and
# first-run in fresh processes (the second now with its convolutions' engines in the file),
# and CUDA's own start beside them.
loads() {
  part "CUDA's start in a fresh process (twice)"
  for i in 1 2; do python3 bench/cuda_start.py | tail -2; done
  loaded_bert ""
  loaded_training 1
}

case "$PART" in
  tests) tests ;;
  figures) figures ;;
  matmul) matmul ;;
  sizes) sizes ;;
  sizes2) sizes2 ;;
  one) one ;;
  final) final ;;
  alltests) alltests ;;
  graphconv) graphconv ;;
  graphconv2) graphconv2 ;;
  loads) loads ;;
  *) echo "usage: bench/issue22_figures.sh tests|figures|matmul|sizes|sizes2|one|final|alltests|graphconv|graphconv2|loads" >&2; exit 2 ;;
esac > "$LOG" 2>&1
rm -rf "$OUT"/cache_* "$OUT"/cudacache_*
tail -c 2000 "$LOG"
