# `make serve`: set up, build and run the app on the default model.
# `make test`: set up and run every test.
SHELL := /bin/bash
MODEL ?= assets/models/all-MiniLM-L6-v2
PORT ?= 8080
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: setup test serve bench lint fixtures

setup:
	@bash scripts/setup.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

# Native tests run the GPU engine on Mesa's lavapipe where there is no GPU; the browser test
# runs it on WebGPU (SwiftShader) in headless Chromium, against the CPU engine in the same page.
test: setup lint
	cargo build --lib --target wasm32-unknown-unknown
	cargo test
	CHROMEDRIVER=/usr/bin/chromedriver wasm-pack test --headless --chrome -- --test web

serve: setup
	cargo build --release
	cargo build --lib --release --target wasm32-unknown-unknown
	./target/release/attnscope attention --model $(MODEL) --backend auto -- "time flies like an arrow" | head -c 400; echo
	@echo "Built the CLI (target/release/attnscope) and the wasm library; the browser app is not built yet."

bench: setup
	cargo run --release -- bench --model $(MODEL)

# Needs `pip install torch transformers safetensors`; the outputs are committed.
fixtures: setup
	python3 tools/make_fixtures.py --model $(MODEL)
