#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each with cargo-fuzz on nightly, seeded by
# fuzz/seeds.py, and prints executions, coverage and crashes per target. `make fuzz-quick` runs
# 30 s per target, `make fuzz` 20 minutes. Fails when any target finds a crash, whose input
# cargo-fuzz keeps in fuzz/artifacts/<target>/. `fuzz/run.sh build` builds them and stops (`make
# test` starts it beside the end-to-end tests).
#   fuzz/run.sh SECONDS [TARGET...] | fuzz/run.sh build
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

SECONDS_PER_TARGET=${1:?usage: fuzz/run.sh SECONDS [TARGET...] | fuzz/run.sh build}
shift
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(weights config tokenizer model forward gguf)

# The longest input each target gets: the tiny checkpoint's files fit with room to grow.
declare -A MAX_LEN=([weights]=65536 [config]=8192 [tokenizer]=16384 [model]=65536 [forward]=4096 [gguf]=65536)
# JSON keys and values for the mutator, where the input holds JSON.
declare -A DICT=([config]=-dict=fuzz/json.dict [tokenizer]=-dict=fuzz/json.dict [model]=-dict=fuzz/json.dict)

# Release build with AddressSanitizer (cargo-fuzz's default sanitizer), once for all targets.
if ! out=$(cargo +nightly fuzz build -O 2>&1); then
  tail -40 <<<"$out" >&2
  echo "fuzz build failed: cargo +nightly fuzz build -O" >&2
  exit 1
fi
[ "$SECONDS_PER_TARGET" != build ] || exit 0

python3 fuzz/seeds.py "${TARGETS[@]}"
# One thread: a panic inside the tokenizers crate must hit libFuzzer on the thread it watches.
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1
mkdir -p fuzz/artifacts
# Each target is one process on one thread: as many at once as the machine has cores (each still
# fuzzes for SECONDS), then their lines in the targets' order.
fuzz_target() {
  local t=$1
  # -rss_limit_mb bounds the process; -malloc_limit_mb makes any single allocation over 256 MB
  # a crash: no input may make the loaders allocate from a header's claim.
  if cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" -- \
      -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -malloc_limit_mb=256 \
      -max_len="${MAX_LEN[$t]}" -timeout=10 ${DICT[$t]:-} -print_final_stats=1 \
      >"fuzz/artifacts/$t.log" 2>&1; then
    echo ok >"fuzz/artifacts/$t.result"
  else
    echo "CRASH (see fuzz/artifacts/$t.log and fuzz/artifacts/$t/)" >"fuzz/artifacts/$t.result"
  fi
}
jobs_at_once=$(nproc)
for t in "${TARGETS[@]}"; do
  rm -f "fuzz/artifacts/$t.result"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_at_once" ]; do wait -n || true; done
  fuzz_target "$t" &
done
wait
status=0
printf '%-10s %12s %8s %8s %8s %s\n' target executions cov ft seconds result
for t in "${TARGETS[@]}"; do
  log=fuzz/artifacts/$t.log
  result=$(cat "fuzz/artifacts/$t.result" 2>/dev/null || echo "no result (see $log)")
  [ "$result" = ok ] || status=1
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(grep -oP '^stat::number_of_executed_units:\s*\K[0-9]+' "$log" || echo '?')
  cov=$(grep -oP 'cov: \K[0-9]+' <<<"$last" || echo '?')
  ft=$(grep -oP 'ft: \K[0-9]+' <<<"$last" || echo '?')
  secs=$(grep -oP 'Done [0-9]+ runs in \K[0-9]+' "$log" || echo '?')
  printf '%-10s %12s %8s %8s %8s %s\n' "$t" "$execs" "$cov" "$ft" "$secs" "$result"
done
exit $status
