#!/usr/bin/env bash
# make fuzz: builds every fuzz target of tests/fuzz (clang's libFuzzer, ASan + UBSan) in
# build-fuzz/ and runs each for FUZZ_SECONDS (default 15: about 4 minutes for the 14
# targets) or FUZZ_RUNS inputs, whichever ends first. Fails on any crash, leak, sanitizer
# report, input slower than FUZZ_TIMEOUT seconds or allocation past FUZZ_RSS_MB. Each
# failing input is minimised and kept as tests/fuzz/corpus/<target>/regression-<sha1>,
# which `make test` replays in the normal build (commit it with the fix).
#
#   make fuzz                                   # every target, 15 s each
#   make fuzz FUZZ_SECONDS=600 FUZZ_RUNS=1000000 FUZZ_TARGETS="hf_dir npy"
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-15}
RUNS=${FUZZ_RUNS:--1}
TIMEOUT=${FUZZ_TIMEOUT:-10}
RSS_MB=${FUZZ_RSS_MB:-2048}
JOBS=${JOBS:-2}

# FUZZ_NO_BUILD=1 runs what build-fuzz/ holds (several target sets side by side, one per core).
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
  bash "$ROOT/scripts/setup.sh" clang libclang-rt-14-dev || exit 1
  # The PJRT backend compiles against the C API header its pinned CPU plugin wheel ships.
  bash "$ROOT/scripts/setup_venv.sh" python/requirements-pjrt.txt || exit 1
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON >/dev/null || exit 1
  cmake --build "$BUILD" -j "$JOBS" --target fuzz_all || exit 1
fi
SUMMARY=$BUILD/fuzz-summary${FUZZ_SUMMARY_SUFFIX:-}.txt

TARGETS=${FUZZ_TARGETS:-$(cat "$BUILD/tests/fuzz/targets.txt")}

# Dictionaries: the format's keywords, from the project's own sources where they change.
DICTS=$BUILD/dicts
mkdir -p "$DICTS"
cp "$ROOT/tests/fuzz/json.dict" "$DICTS/json.dict"
{ cat "$ROOT/tests/fuzz/json.dict"
  sed -n 's/^\([a-z_][a-z0-9_]*\):.*/"\1"/p' "$ROOT/configs/base.yml"; } >"$DICTS/config.dict"
{ sed -n 's/^KILN_OPCODE([A-Za-z0-9]*, *"\([a-z0-9_]*\)".*/"\1"/p' "$ROOT/src/kiln/ir/opcodes.def"
  for w in module ENTRY computation ROOT parameter index f32 bf16 f16 f64 s32 s64 u8 pred '%' '@' '{' '}' '[' ']' '=' dims perm; do
    echo "\"$w\""; done; } >"$DICTS/ir.dict"
dict_for() {
  case "$1" in
    config_yaml|config_overrides) echo "$DICTS/config.dict" ;;
    ir_text) echo "$DICTS/ir.dict" ;;
    safetensors|checkpoint_dir|checkpoint_manifest|hf_dir|mxfp4|tiktoken|token_manifest|corpus) echo "$DICTS/json.dict" ;;
    *) echo "" ;;
  esac
}

failed=()
printf '%-20s %10s %8s %8s %8s  %s\n' target execs exec/s cov ft result >"$SUMMARY"
for t in $TARGETS; do
  bin=$BUILD/tests/fuzz/fuzz_$t
  work=$BUILD/fuzz-corpus/$t
  art=$BUILD/artifacts/$t
  rm -rf "$art"  # only this run's failures are minimised and kept
  mkdir -p "$work" "$art"
  read -r -a seeds <"$BUILD/tests/fuzz/fuzz_$t.seeds"
  dict=$(dict_for "$t")
  log=$BUILD/fuzz-$t.log
  echo "fuzz: $t for ${SECONDS_EACH}s (log $log)"
  KILN_CONFIGS_DIR="$ROOT/configs" ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    "$bin" -max_total_time="$SECONDS_EACH" -runs="$RUNS" -timeout="$TIMEOUT" -rss_limit_mb="$RSS_MB" \
    -malloc_limit_mb="$RSS_MB" -artifact_prefix="$art/" -print_final_stats=1 ${dict:+-dict="$dict"} \
    "$work" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (exit $rc)"
    failed+=("$t")
    for crash in "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-* "$art"/slow-unit-*; do
      [ -f "$crash" ] || continue
      min=$art/minimized-$(basename "$crash")
      KILN_CONFIGS_DIR="$ROOT/configs" "$bin" -minimize_crash=1 -max_total_time=60 -timeout="$TIMEOUT" \
        -rss_limit_mb="$RSS_MB" -exact_artifact_path="$min" "$crash" >>"$log" 2>&1
      [ -f "$min" ] || min=$crash
      keep=$ROOT/tests/fuzz/corpus/$t/regression-$(sha1sum "$min" | cut -c1-16)
      cp "$min" "$keep"
      echo "fuzz: $t: kept $keep"
    done
    grep -m3 -E 'ERROR|SUMMARY|Check failed|terminate' "$log" | sed "s/^/fuzz: $t: /"
  fi
  printf '%-20s %10s %8s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$result" \
    | tee -a "$SUMMARY"
done
cat "$SUMMARY"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]} (inputs kept under tests/fuzz/corpus/<target>/regression-*)"
  exit 1
fi
