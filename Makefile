# The two commands of the README (`make demo`, `make test`) and developer conveniences.
# Python: one interpreter for the project, the first python3 on the PATH unless PYTHON is set.
PYTHON ?= python3
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
export PYTHON

.PHONY: all deps build demo test test-asan format lint install clean fuzz

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

# libFuzzer runs of the ONNX importer and the .tgx loader (FUZZ_SECONDS each, default 60).
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTGRAPH_FUZZ=ON \
	  -DTGRAPH_WITH_CUDA=OFF -DTGRAPH_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_tgx_load fuzz_onnx_import
	mkdir -p build-fuzz/corpus-onnx build-fuzz/corpus-tgx
	for d in /usr/share/libonnx-testdata/data/node/test_*; do cp $$d/model.onnx build-fuzz/corpus-onnx/$$(basename $$d).onnx; done
	./build-fuzz/tests/fuzz/fuzz_onnx_import -max_total_time=$(or $(FUZZ_SECONDS),60) build-fuzz/corpus-onnx
	./build-fuzz/tests/fuzz/fuzz_tgx_load -max_total_time=$(or $(FUZZ_SECONDS),60) build-fuzz/corpus-tgx
