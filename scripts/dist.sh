#!/usr/bin/env bash
# Writes dist/: the static app (index.html, attn-scope.js, web/ with the wasm, the worker and the
# styles, the reference numbers), the default model and the dates model, all with relative URLs. Copy dist/ to any
# static host, under any path. Needs `make web` first (the Makefile's dist target does it).
set -euo pipefail
cd "$(dirname "$0")/.."
for pkg in web/pkg web/pkg-relaxed web/pkg-threads; do
  [ -f $pkg/attnscope_bg.wasm ] || { echo "dist: $pkg is missing: run make web" >&2; exit 1; }
done
rm -rf dist
mkdir -p dist/assets/models/all-MiniLM-L6-v2
cp index.html attn-scope.js dist/
# the app's own files only (no tests, no sources)
(cd web && find . -type f \( -name '*.js' -o -name '*.css' -o -name '*.wasm' -o -name '*.json' \) -exec install -D -m 644 {} ../dist/web/{} \;)
cp assets/models/all-MiniLM-L6-v2/{config.json,model.safetensors,tokenizer.json} dist/assets/models/all-MiniLM-L6-v2/
# the dates → ISO translation model trained by tools/train_dates.py (committed, under 1 MB)
mkdir -p dist/models/dates
cp models/dates/{config.json,model.safetensors,tokenizer.json} dist/models/dates/
# SmolLM2-135M-Instruct (GGUF Q4_1, from scripts/setup.sh), the built-in model that generates
SMOL=assets/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$SMOL" ]; then
  install -D -m 644 "$SMOL" "dist/$SMOL"
  echo "dist: $(basename "$SMOL"): $(du -h "$SMOL" | cut -f1)" >&2
else
  echo "dist: $SMOL is missing (scripts/setup.sh fetches it): the Model select's SmolLM2 will not load" >&2
fi
# Gemma 3 270M (GGUF Q4_K_M, from scripts/setup.sh), the built-in model with sliding-window layers
GEMMA=assets/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf
if [ -f "$GEMMA" ]; then
  install -D -m 644 "$GEMMA" "dist/$GEMMA"
  echo "dist: $(basename "$GEMMA"): $(du -h "$GEMMA" | cut -f1)" >&2
else
  echo "dist: $GEMMA is missing (scripts/setup.sh fetches it): the Model select's Gemma 3 will not load" >&2
fi
cp scripts/headers.txt dist/_headers
echo "dist: $(du -sh dist | cut -f1) in dist/ ($(find dist -type f | wc -l) files)" >&2
