#!/usr/bin/env bash
# make gpu-bundle: a self-contained kiln to carry to a GPU machine that has none of Kiln's
# Debian packages (docs/backends.md, "On a GPU").
#
#   scripts/gpu_bundle.sh [KILN [OUT_DIR]] [--no-tarball]     (default build/kiln dist/kiln-gpu)
#
# OUT_DIR/kiln        the binary, debug info stripped, rpath $ORIGIN/lib (DT_RPATH: searched
#                     before LD_LIBRARY_PATH, so another OpenMPI there cannot replace ours)
# OUT_DIR/lib/        every shared library ldd names, except what any Linux with a GPU driver
#                     has: glibc (libc, libm, libpthread, libdl, librt, ld-linux), libstdc++,
#                     libgcc_s and the driver's own (libcuda, libnvidia-*); each with rpath $ORIGIN
# OUT_DIR/configs/    base.yml, models/, targets/ and the 3.5B reference config
# OUT_DIR/bench/      gpu_run.py, jax_gpt_oss.py, peers_common.py (make gpu's driver and JAX side)
# OUT_DIR/gpu.sh      runs the driver from the bundle: OUT_DIR/gpu.sh [make gpu's arguments]
# and OUT_DIR.tar.gz  the same, compressed, for carrying (unless --no-tarball).
#
# Then checks it: every bundled library resolves inside OUT_DIR/lib, `kiln --help` and a tiny
# `kiln train` (backend=interpreter: no host compiler needed) run with LD_LIBRARY_PATH unset
# from another directory; fails in one line when the bundle passes 64 MiB. The CUDA PJRT
# plugin is not bundled (400 MB): the GPU machine's own is used.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tarball=1
args=()
for arg in "$@"; do
  case "$arg" in
    --no-tarball) tarball=0 ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_bundle.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) args+=("$arg") ;;
  esac
done
KILN="${args[0]:-$ROOT/build/kiln}"
OUT="${args[1]:-$ROOT/dist/kiln-gpu}"
LIMIT_MIB=64

fail() { echo "make gpu-bundle: $*" >&2; exit 1; }
[ -x "$KILN" ] || fail "no kiln binary at $KILN (make build first)"
command -v patchelf > /dev/null || fail "patchelf is missing (scripts/setup.sh installs it: apt-get install patchelf)"

OUT="$(mkdir -p "$(dirname "$OUT")" && cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")"
rm -rf "$OUT"
mkdir -p "$OUT/lib" "$OUT/bench" "$OUT/configs"
# Nothing under dist/ belongs in git.
if [ "$(basename "$(dirname "$OUT")")" = dist ] && [ ! -e "$(dirname "$OUT")/.gitignore" ]; then
  echo '*' > "$(dirname "$OUT")/.gitignore"
fi

# The libraries: ldd's resolved paths, minus what the GPU machine brings.
system_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*) return 0 ;;
    libstdc++.so*|libgcc_s.so*) return 0 ;;
    libcuda.so*|libnvidia-*) return 0 ;;
  esac
  return 1
}
missing=$(ldd "$KILN" | awk '/not found/ { print $1 }')
[ -z "$missing" ] || fail "ldd cannot find ${missing//$'\n'/ } for $KILN"
while read -r soname path; do
  [ -n "$soname" ] || continue
  system_lib "$soname" && continue
  [ -f "$path" ] || fail "ldd names $soname at $path, which is no file"
  cp -L "$path" "$OUT/lib/$soname"
  chmod u+w "$OUT/lib/$soname"
  strip --strip-debug "$OUT/lib/$soname"
  # shellcheck disable=SC2016  # $ORIGIN is the loader's, not the shell's
  patchelf --force-rpath --set-rpath '$ORIGIN' "$OUT/lib/$soname"
done < <(ldd "$KILN" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')

cp "$KILN" "$OUT/kiln"
chmod u+w "$OUT/kiln"
strip --strip-debug "$OUT/kiln"
# shellcheck disable=SC2016
patchelf --force-rpath --set-rpath '$ORIGIN/lib' "$OUT/kiln"

cp "$ROOT/configs/base.yml" "$ROOT/configs/gpt-oss-3.5b-v6e4.yml" "$OUT/configs/"
cp -r "$ROOT/configs/models" "$ROOT/configs/targets" "$OUT/configs/"
cp "$ROOT/bench/gpu_run.py" "$ROOT/bench/jax_gpt_oss.py" "$ROOT/bench/peers_common.py" "$OUT/bench/"
cat > "$OUT/gpu.sh" <<'EOF'
#!/usr/bin/env bash
# make gpu from this bundle: its kiln, configs and scripts; the machine's python3 with JAX.
exec "${PYTHON:-python3}" "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bench/gpu_run.py" "$@"
EOF
chmod +x "$OUT/gpu.sh"

# The checks.
while read -r soname path; do
  case "$path" in
    "$OUT"/lib/*) ;;
    *) system_lib "$soname" || fail "the bundled kiln finds $soname at $path, not in $OUT/lib" ;;
  esac
done < <(env -u LD_LIBRARY_PATH ldd "$OUT/kiln" | awk '$2 == "=>" { print $1, $3 }')
check_dir="$(mktemp -d)"
trap 'rm -rf "$check_dir"' EXIT
(cd "$check_dir" && env -u LD_LIBRARY_PATH "$OUT/kiln" --help > help.txt 2>&1) ||
  fail "the bundled kiln --help failed: $(tail -1 "$check_dir/help.txt")"
(cd "$check_dir" && env -u LD_LIBRARY_PATH KILN_CONFIGS_DIR="$OUT/configs" KILN_PROGRESS=off "$OUT/kiln" train \
  model_name=gpt-oss-tiny override_model_config=true base_emb_dim=32 base_mlp_dim=32 base_moe_mlp_dim=16 \
  head_dim=8 base_num_query_heads=2 base_num_kv_heads=1 base_num_decoder_layers=2 vocab_size=32 num_experts=2 \
  max_target_length=8 per_device_batch_size=2 steps=2 backend=interpreter enable_checkpointing=false \
  enable_tensorboard=false base_output_directory="$check_dir/out" run_name=bundle > train.txt 2>&1) ||
  fail "the bundled kiln's tiny train failed: $(tail -1 "$check_dir/train.txt")"
grep -q "completed step: 1" "$check_dir/train.txt" || fail "the bundled kiln's tiny train ran no step"

bytes=$(du -sb "$OUT" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if [ "$bytes" -gt $((LIMIT_MIB * 1048576)) ]; then
  fail "the bundle is $mib MiB, over the $LIMIT_MIB MiB a lent GPU machine takes"
fi
kiln_mib=$(du -b "$OUT/kiln" | cut -f1 | awk '{ printf "%.1f", $1 / 1048576 }')
summary="$OUT: $mib MiB (kiln $kiln_mib MiB, $(find "$OUT/lib" -type f | wc -l) libraries)"
if [ "$tarball" = 1 ]; then
  tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
  summary="$summary; $OUT.tar.gz: $(du -b "$OUT.tar.gz" | cut -f1 | awk '{ printf "%.1f", $1 / 1048576 }') MiB"
fi
echo "make gpu-bundle: $summary; checked: libraries from lib/, kiln --help and a tiny train without LD_LIBRARY_PATH"
