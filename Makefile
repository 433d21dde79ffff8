# `make serve`: set up, build and run the app on the default model.
# `make test`: set up and run every test.
SHELL := /bin/bash
MODEL ?= assets/models/all-MiniLM-L6-v2
PORT ?= 8080
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: setup test serve bench lint lint-native fixtures web dist wheel

setup:
	@bash scripts/setup.sh

lint: lint-native
	cargo clippy --lib --target wasm32-unknown-unknown -- -D warnings
lint-native:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

# `make test` lints the native code in the build its tests need, not in a second compile:
# clippy-driver wraps rustc for this crate's targets alone (the library, the CLI, the test
# binaries: what `cargo clippy --all-targets` checks), with the arguments `cargo clippy -- -D
# warnings` would give it (CLIPPY_ARGS, `__CLIPPY_HACKERY__` between them), so any warning fails
# the build. The dependencies are compiled as by a plain `cargo test`.
LINT_NATIVE := RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

# Native tests run the GPU engine on Mesa's lavapipe where there is no GPU; the browser test
# runs it on WebGPU (SwiftShader) in headless Chromium, against the CPU engine in the same page.
# The wasm32 code's lints come with its first build (LINT_WASM=1, below), and the browser test
# links that build's library (the same profile, flags and features). The e2e tests compare the
# page with the CLI `cargo test` built and ran (ATTNSCOPE_CLI: a `cargo run` without the lints'
# wrapper would build the crate again, ~70 s). The runner gives the whole browser
# test 20 s unless told: WEB_TEST_TIMEOUT is a guard against a hang (the suite takes ~20 s on
# SwiftShader alone, more on a busy machine), not a measure of speed.
WEB_TEST_TIMEOUT ?= 600
test: setup
	cargo fmt --all -- --check
	$(MAKE) --no-print-directory web wheel LINT_WASM=1
	$(LINT_NATIVE) cargo test
	target/py/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/attnscope-*.whl
	cd python && ../target/py/bin/python -m pytest -q
	CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$(SIMD128_FLAGS) -D warnings" \
		CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner CHROMEDRIVER=/usr/bin/chromedriver \
		WASM_BINDGEN_TEST_ONLY_WEB=1 WASM_BINDGEN_TEST_TIMEOUT=$(WEB_TEST_TIMEOUT) cargo test --release --target $(WASM) --test web
	bash scripts/dist.sh
	$(FUZZ_BUILD_BESIDE) (cd tests/e2e && ATTNSCOPE_CLI=$(CURDIR)/target/debug/attnscope npm test); rc=$$?; \
		[ $$rc = 0 ] || kill -- -$$fuzz_build 2>/dev/null || kill $$fuzz_build 2>/dev/null; wait $$fuzz_build; exit $$rc
	$(MAKE) --no-print-directory fuzz-quick

# The fuzz targets' AddressSanitizer build (~6 minutes of both cores, fuzz-quick's first step)
# runs beside the end-to-end tests, which leave about a fifth of the machine idle (the browser
# waits on itself), as SCHED_IDLE: it runs only when a core would be idle, and a test's process
# takes the core back on waking (they still ran ~3 minutes longer beside it, sharing caches and
# memory: docs/speed.md). fuzz-quick then finds it built; were it broken, fuzz-quick's own build
# says why. Its own process group (setsid), stopped when the tests fail.
FUZZ_BUILD_BESIDE := setsid chrt --idle 0 bash fuzz/run.sh build >target/fuzz-build.log 2>&1 & fuzz_build=$$!;

# Fuzzing (cargo-fuzz on nightly, both installed by setup): every fuzz target for 30 s, as part of
# `make test`, or for 20 minutes each. Figures and crashes: docs/fuzzing.md.
.PHONY: fuzz-quick fuzz
fuzz-quick: setup
	bash fuzz/run.sh 30
fuzz: setup
	bash fuzz/run.sh 1200

# The wasm core for the page, in three builds (git-ignored), each in its own target folder so none
# rebuilds another; the worker (web/worker.js) picks the fastest the browser can run:
# * web/pkg-threads: rayon's threads on Web Workers (nightly, -Z build-std, atomics and shared
#   memory; the `threads` feature), with relaxed SIMD, where the page is cross-origin isolated;
# * web/pkg-relaxed: one thread, relaxed SIMD (fused multiply-adds) where the browser has it;
# * web/pkg: one thread, SIMD128 (stable): every other browser.
# Each is cargo's release build of the library for wasm32, then wasm-bindgen's glue for the web
# (the CLI at the version Cargo.lock pins, installed by setup); no wasm-opt (it would be
# downloaded, and nothing may be). LINT_WASM=1 (`make test`) builds web/pkg with clippy-driver
# wrapping rustc for this crate alone, warnings denied: `cargo clippy --lib --target
# wasm32-unknown-unknown -- -D warnings`'s lints, at no second compile.
WASM := wasm32-unknown-unknown
SIMD128_FLAGS := -C target-feature=+simd128
RELAXED_SIMD_FLAGS := -C target-feature=+simd128,+relaxed-simd
THREADS_FLAGS := -C target-feature=+simd128,+relaxed-simd,+atomics,+bulk-memory \
	-C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
	-C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size \
	-C link-arg=--export=__tls_align -C link-arg=--export=__tls_base
LINT_WASM ?=
WASM_BINDGEN := wasm-bindgen --target web --no-typescript
web:
	$(if $(LINT_WASM),RUSTC_WORKSPACE_WRAPPER=clippy-driver) CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$(SIMD128_FLAGS)$(if $(LINT_WASM), -D warnings)" \
		cargo build --lib --release --target $(WASM)
	$(WASM_BINDGEN) --out-dir web/pkg target/$(WASM)/release/attnscope.wasm
	CARGO_TARGET_DIR=target/relaxed-simd CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$(RELAXED_SIMD_FLAGS)" \
		cargo build --lib --release --target $(WASM)
	$(WASM_BINDGEN) --out-dir web/pkg-relaxed target/relaxed-simd/$(WASM)/release/attnscope.wasm
	CARGO_TARGET_DIR=target/threads CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$(THREADS_FLAGS)" \
		cargo +nightly build --lib --release --target $(WASM) --features threads -Z build-std=panic_abort,std
	$(WASM_BINDGEN) --out-dir web/pkg-threads target/threads/$(WASM)/release/attnscope.wasm

# The static build: the page, <attn-scope>, the wasm, the worker and the default model, with
# relative URLs, for any static host under any path (docs/app.md: "Publishing").
dist: setup web
	bash scripts/dist.sh

# The Python package (python/) as a wheel in target/wheels/, the notebook's front end inside it
# (python/js/build.mjs: <attn-scope>, its views and the engine's worker as one ES module for
# anywidget, and the one-thread wasm build, which the kernel sends to the page for run()).
wheel: setup web
	cd python/js && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && node build.mjs
	rm -rf python/build
	target/py/bin/python -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir target/wheels ./python
	rm -rf python/build

serve: setup web
	PORT=$(PORT) python3 scripts/serve.py

# ms per forward pass (CPU and GPU engines); attnscope beside PyTorch (native) and ONNX Runtime
# Web (headless Chromium) in one table (bench/peers.mjs: a peer whose prerequisites are missing,
# torch for PyTorch and for the ONNX export, is skipped with a note); then the page: first
# heatmap, memory, keystroke → heatmaps, the inside-the-encoder panels; the first heatmap cold and
# warm on a plain static host and an isolated one (tests/e2e/first_view.mjs); a WebGPU generation's
# step in its phases and dispatches (tests/e2e/gpu_step_bench.mjs); a long text: its first view and
# keystrokes, a generation after it, a head focused on it (long_bench, long_gen_bench, focus_bench).
bench: setup web
	cargo run --release -- bench --model $(MODEL)
	cd bench && { [ -d node_modules ] || npm ci --no-audit --no-fund; }
	[ -f $(MODEL)/onnx/model.onnx ] || python3 bench/export_onnx.py --model $(MODEL) || echo "bench: no ONNX export (it needs torch): ONNX Runtime Web will be skipped"
	cd bench && MODEL=$(abspath $(MODEL)) node peers.mjs
	cd tests/e2e && npm run bench
	cd tests/e2e && node first_view.mjs
	$(MAKE) --no-print-directory bench-translate
	$(MAKE) --no-print-directory bench-llm
	cd tests/e2e && node gemma_bench.mjs
	cd tests/e2e && node gpu_step_bench.mjs
	cd tests/e2e && node long_bench.mjs
	cd tests/e2e && node long_gen_bench.mjs
	cd tests/e2e && node focus_bench.mjs
	cd tests/e2e && node roles_bench.mjs
	$(MAKE) --no-print-directory bench-notebook

# The notebook: the wheel's size, and a 512-token model's attention from head_view / model_view to
# the view drawn in a real JupyterLab (tests/e2e/notebook_bench.mjs).
.PHONY: bench-notebook
bench-notebook: wheel
	target/py/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/attnscope-*.whl
	cd tests/e2e && node notebook_bench.mjs

# A Llama-family model generating (SmolLM2-135M-Instruct's Q4_1 GGUF, fetched by setup): attnscope
# beside llama.cpp (llama-cpp-python, built here from PyPI: ~10 minutes the first time, skipped
# with a note where it cannot build; AMX off: this machine's CPU lists AMX, whose instructions trap
# here, and ggml's GGML_AMX_* options do nothing once GGML_NATIVE is on) and PyTorch (HF from the
# same GGUF), on 1 and 2 threads; then the page generating in headless Chromium (the threaded
# build) beside llama.cpp in wasm (@wllama/wllama, installed by setup from npm) in the same
# browser (tests/e2e/llm_bench.mjs).
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
.PHONY: bench-llm
bench-llm: setup web
	cargo build --release
	python3 -c "import llama_cpp" 2>/dev/null || CMAKE_ARGS="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)'" python3 -m pip install --quiet llama-cpp-python || echo "bench: llama-cpp-python did not build: llama.cpp will be skipped"
	python3 bench/llm.py
	cd tests/e2e && npm run bench-llm

# Translation at opus-mt-en-de's size (a random checkpoint, tools/make_opus_shape.py, git-ignored):
# attnscope (CPU and GPU engines, 2 and 1 threads), HF's generate (PyTorch, 1 and 2 threads), and
# the wasm engine in headless Chromium; then a keystroke on the dates model in the page.
OPUS := assets/models/opus-mt-en-de-shape-random
.PHONY: bench-translate
bench-translate: setup web
	[ -f $(OPUS)/model.safetensors ] || python3 tools/make_opus_shape.py
	cargo run --release -- bench --model $(OPUS)
	cargo run --release -- bench --model $(OPUS) --backend cpu --threads 1
	python3 bench/torch_translate.py || echo "bench: no PyTorch peer (it needs torch and transformers)"
	cd tests/e2e && node translate_bench.mjs
	cd tests/e2e && node translation_keys.mjs && INSIDE=1 node translation_keys.mjs

# Needs `pip install torch transformers safetensors`; the outputs are committed.
fixtures: setup
	python3 tools/make_fixtures.py --model $(MODEL)
