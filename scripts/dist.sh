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
cp scripts/headers.txt dist/_headers
echo "dist: $(du -sh dist | cut -f1) in dist/ ($(find dist -type f | wc -l) files)" >&2
