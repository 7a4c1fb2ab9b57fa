# The two commands of the README (`make demo`, `make test`) and developer conveniences.
# Python: one interpreter for the project, the first python3 on the PATH unless PYTHON is set.
PYTHON ?= python3
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
export PYTHON

.PHONY: all deps build demo test test-asan stress format lint install clean fuzz

all: build

deps:
	./scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$$(command -v $(PYTHON)) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# The main job: train a small ResNet on Fashion-MNIST on the best device present.
demo: build
	./$(BUILD)/examples/train_fashion_mnist --epochs $(or $(EPOCHS),4) --out out/fashion_mnist

test: build
	./scripts/run-tests.sh $(BUILD)

# Concurrency stress for a minute each (issue 25): 8 threads on 4 executables against serial
# results; two processes saving one .tgx and checkpoint path. `make test` runs them for 3 s.
stress: build
	PYTHONPATH=$(BUILD)/python TGRAPH_STRESS_SECONDS=$(or $(STRESS_SECONDS),60) $(PYTHON) -m pytest -q -p no:cacheprovider tests/python/test_stress.py

test-asan: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTGRAPH_SANITIZE=ON -DTGRAPH_WITH_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TG_SKIP_CONSUMER=1 ./scripts/run-tests.sh build-asan

format:
	git ls-files '*.h' '*.cpp' '*.cu' | xargs clang-format -i

# clang-tidy on the C++ files changed against main (or all with LINT_ALL=1).
lint:
	./scripts/lint.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(or $(PREFIX),/usr/local)

clean:
	rm -rf $(BUILD) build-asan

# libFuzzer runs (ASan + UBSan) of the ONNX importer, the .tgx loader, the .npy reader and the
# graph builder: FUZZ_SECONDS each (default 60), or FUZZ_RUNS executions each (the campaign of
# issue 25: FUZZ_RUNS=10000000). Corpora grow in build-fuzz/corpus-*; crashes land in
# build-fuzz/ as crash-* files (copy them to tests/fuzz/regressions/).
FUZZ_LIMIT = $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(or $(FUZZ_SECONDS),60))
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTGRAPH_FUZZ=ON \
	  -DTGRAPH_WITH_CUDA=OFF -DTGRAPH_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_tgx_load fuzz_onnx_import fuzz_npy_read fuzz_graph_build
	mkdir -p build-fuzz/corpus-onnx build-fuzz/corpus-tgx build-fuzz/corpus-npy build-fuzz/corpus-graph
	for d in /usr/share/libonnx-testdata/data/node/test_*; do cp $$d/model.onnx build-fuzz/corpus-onnx/$$(basename $$d).onnx; done
	cp tests/conformance/*.npy build-fuzz/corpus-npy/
	cp tests/fuzz/seeds/tgx_*.bin build-fuzz/corpus-tgx/
	cd build-fuzz && ./tests/fuzz/fuzz_onnx_import $(FUZZ_LIMIT) corpus-onnx
	cd build-fuzz && ./tests/fuzz/fuzz_tgx_load $(FUZZ_LIMIT) corpus-tgx
	cd build-fuzz && ./tests/fuzz/fuzz_npy_read $(FUZZ_LIMIT) corpus-npy
	cd build-fuzz && ./tests/fuzz/fuzz_graph_build $(FUZZ_LIMIT) corpus-graph
