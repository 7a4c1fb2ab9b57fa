#!/usr/bin/env bash
# One GPU run that checks a whole session's work (after TG_BUILD_ONLY=1 scripts/device-build.sh
# with TG_TARGETS="tgraph_gpu_tests bench_gpu train_fashion_mnist jacobi_while_loop"): the benchmarks
# alone first, then every GPU test suite at once beside a short bf16 training run, then
# compute-sanitizer memcheck and racecheck over the whole GPU test binary.
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
# The benchmarks first, alone on the device (a run that hits its time limit still keeps them).
# TG_ONLY=bench stops after them; TG_ONLY=checks skips them (two calls when one would run long).
if [ "${TG_ONLY:-}" != checks ]; then
timeout 120 stdbuf -oL ./build-gpu/bench/bench_gpu > "$OUT/bench_gpu.log" 2>&1
echo "bench rc=$?"; cat "$OUT/bench_gpu.log"
timeout 90 python3 bench/gpu_bench_torch.py bias_grad batch_norm broadcast while_loop 2>&1 | tee "$OUT/bench_torch.log"
# The Jacobi while_loop solver against the same solve as a PyTorch loop (issue 8's figure).
for n in 512 4096; do
  ./build-gpu/examples/jacobi_while_loop --device cuda --n $n --repeat 20 2>&1 | sed "s/^/tgraph n=$n: /"
  python3 bench/jacobi_torch.py $n 20 2>&1
done | tee "$OUT/jacobi.log"
fi
[ "${TG_ONLY:-}" = bench ] && exit 0
( timeout 200 ./build-gpu/examples/train_fashion_mnist --epochs 2 --precision bf16 --device cuda \
    --data /opt/devroot/usr/share/datasets/fashion-mnist --out "$OUT/fm_bf16" > "$OUT/demo_bf16.log" 2>&1
  tr "\r" "\n" < "$OUT/demo_bf16.log" | grep -E "^(epoch [0-9]+:|final)" | sed 's/^/bf16 /' ) &
TG_PARALLEL=1 scripts/device-suites.sh > "$OUT/suites.txt" 2>&1
wait
cat "$OUT/suites.txt"
# The sanitizers over the whole GPU test binary, after the suites (scripts/device-sanitize.sh:
# memcheck one shard at a time, racecheck in parallel shards). TG_STRESS=1 also runs memcheck on
# the control-flow suite while other processes load the GPU, where it has faulted
# (scripts/device-sanitize-under-load.sh; bench/RESULTS.md, fifth session).
scripts/device-sanitize.sh memcheck
TG_SANITIZE_TIMEOUT=300 scripts/device-sanitize.sh racecheck
[ "${TG_STRESS:-0}" = 1 ] && scripts/device-sanitize-under-load.sh 'CudaControlFlow.*'
