#!/usr/bin/env bash
# Kiln across hosts, as a cluster user launches it (OpenMPI, a hostfile, TCP between hosts),
# on the namespace cluster of scripts/netns_cluster.sh. docs/multihost.md explains the output.
#
#   scripts/multihost_run.sh [options] compare      # 2 hosts × 2 ranks: fsdp 4 and fsdp 2 × expert 2
#                                                   # against the one-process run: PASS/FAIL table
#   scripts/multihost_run.sh [options] dead-host    # kill one host's ranks mid-run, time the stop,
#                                                   # restart on the surviving host, compare losses
#   scripts/multihost_run.sh [options] unreachable  # a host that does not answer: one line, no hang
#   scripts/multihost_run.sh [options] all          # the three above
#   scripts/multihost_run.sh [options] launch HOSTFILE NP PROGRAM [ARGS...]
#                                                   # check every host, then mpirun (what the others use)
# options:
#   --kiln PATH       the kiln binary (env KILN; default build/kiln)
#   --steps N         steps of the compare runs (default 8)
#   --out DIR         base_output_directory, seen by every host (default: a new /tmp/kiln_multihost.*)
#   --dead-steps N    steps of the dead-host run (default 40; checkpoint_period 10)
#   --power-off       dead-host: take the host's link down before killing its ranks (a power
#                     loss: no TCP reset reaches the others) instead of only killing them
#   --hang            dead-host: stop (SIGSTOP) the host's ranks instead: its daemon and link stay
#                     up, so only Kiln's collective timeout can end the job
#   --keep            keep the output directory
# The cluster (scripts/netns_cluster.sh up 2) is brought up for the run and taken down after,
# unless it is already up. Exit status: 0 all PASS, 1 a FAIL, 77 namespaces unavailable.
set -euo pipefail

readonly here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly repo=$(dirname "$here")
readonly cluster=$here/netns_cluster.sh
kiln=${KILN:-$repo/build/kiln}
steps=8
dead_steps=40
out=""
keep=0
power_off=0
hang=0
timeout_s=${KILN_COLLECTIVE_TIMEOUT_S:-20}

# gpt-oss-tiny shrunk as in tests/train/mpi_training_test.py: 4 experts top-2, 2 layers.
readonly MODEL=(model_name=gpt-oss-tiny override_model_config=true base_emb_dim=64 base_mlp_dim=64
  base_moe_mlp_dim=32 head_dim=16 base_num_query_heads=4 base_num_kv_heads=2 base_num_decoder_layers=2
  vocab_size=64 num_experts=4 sliding_window_size=8 max_target_length=8 learning_rate=1e-2 log_period=100
  enable_tensorboard=false)
readonly TOL=1e-4  # relative, per step: float32 sums in another order (as mpi_training_run)

say() { echo "multihost: $*"; }
die() { echo "multihost: error: $*" >&2; exit 1; }

# ---- launching -----------------------------------------------------------------------------

# The address the hosts' daemons call back to (mpirun's end of the bridge).
launcher_addr() { echo "${KILN_NETNS_PREFIX:-10.77.0}.254"; }

# Every host of HOSTFILE must (1) run a command through the launch agent and (2) open a TCP
# connection back to the launcher. OpenMPI reports (1) as a 40-line banner and does not notice
# (2) at all: its daemons wait for ever (orte_startup_timeout is not honoured by OpenMPI 4.1).
preflight() {
  local hostfile=$1 agent=$2 addr port listener host line=0 err
  addr=$(launcher_addr)
  exec {lfd}< <(/usr/bin/python3 -c '
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(64)
print(s.getsockname()[1], flush=True)
while True: s.accept()[0].close()' "$addr" 2>&1)
  listener=$!
  read -r port <&$lfd || true
  [[ $port =~ ^[0-9]+$ ]] || { kill "$listener" 2>/dev/null; die "cannot listen on the launcher address $addr: $port"; }
  local bad=0
  while read -r host rest || [[ -n ${host:-} ]]; do
    line=$((line + 1))
    [[ -z ${host:-} || $host == \#* ]] && continue
    if ! err=$(timeout 15 $agent "$host" true 2>&1 </dev/null); then
      echo "multihost: error: host $host ($hostfile line $line) is unreachable: $(tail -1 <<<"${err:-no answer in 15 s}")" >&2
      bad=1; continue
    fi
    if ! timeout 10 $agent "$host" "bash -c 'exec 3<>/dev/tcp/$addr/$port'" >/dev/null 2>&1 </dev/null; then
      echo "multihost: error: host $host ($hostfile line $line) cannot open a TCP connection back to the launcher at $addr:$port (firewall or route); mpirun would hang" >&2
      bad=1
    fi
  done <"$hostfile"
  kill "$listener" 2>/dev/null || true
  exec {lfd}<&-
  return $bad
}

# launch HOSTFILE NP PROGRAM ARGS...: preflight, then mpirun with the cluster's flags and the
# environment the ranks need (a launch agent gives them a clean one, as ssh does).
launch() {
  local hostfile=$1 np=$2
  shift 2
  local -a mpi
  mapfile -t mpi < <("$cluster" mpi_args)
  preflight "$hostfile" "$cluster agent" || return 1
  local -a root=()
  [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  # mpirun runs in a session of its own, so that no signal meant for its process group can
  # reach this script (CI twice saw this script end without a word during the first training
  # launch; the cause is not known). A signal to this script is passed on (stop_launches).
  setsid -w mpirun "${root[@]}" -np "$np" --hostfile "$hostfile" "${mpi[@]}" \
    -x OMP_NUM_THREADS=1 -x KILN_PROGRESS=off -x KILN_COLLECTIVE_TIMEOUT_S="$timeout_s" \
    -x KILN_CONFIGS_DIR="$repo/configs" -x KILN_CACHE_DIR="${KILN_CACHE_DIR:-${HOME:-/root}/.cache/kiln}" \
    -x OMPI_MCA_btl_vader_single_copy_mechanism=none -x ASAN_OPTIONS=detect_leaks=0 "$@" &
  local pid=$! rc=0
  echo "$pid" >>"$launched"
  wait "$pid" || rc=$?
  return "$rc"
}

# Ends every mpirun this script started on INT, TERM or HUP: each leads a session and process
# group of its own (setsid without a fork: the background child is no group leader).
launched=$(mktemp /tmp/kiln_launched.XXXXXX)
stop_launches() {
  local pid
  while read -r pid; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done <"$launched" 2>/dev/null || true
}
on_signal() {  # NAME STATUS
  echo "multihost: stopped by $1; ending the mpirun jobs it started" >&2
  stop_launches
  exit "$2"
}
# Never end without a word: a command failing under set -e, or a signal, names itself.
set -o errtrace
trap 'echo "multihost: error: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR
trap 'on_signal SIGINT 130' INT
trap 'on_signal SIGTERM 143' TERM
trap 'on_signal SIGHUP 129' HUP
trap 'rm -f "$launched"' EXIT

bytes_through_links() {  # total bytes through every host link (both directions)
  cat /sys/class/net/kiln-v*/statistics/{rx,tx}_bytes 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

one_process() {  # run_name steps extra... (the reference: one process, one device, global batch 4 unless extra says)
  local name=$1 n=$2
  shift 2
  OMP_NUM_THREADS=1 KILN_PROGRESS=off KILN_CONFIGS_DIR="$repo/configs" "$kiln" train "${MODEL[@]}" steps="$n" \
    per_device_batch_size=4 "$@" local_devices=1 ici_fsdp_parallelism=1 enable_checkpointing=false \
    run_name="$name" base_output_directory="$out" >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log"; die "the one-process run $name failed"; }
}

# compare_losses REF RUN FIRST_STEP: rows "max_rel_diff steps result" for steps >= FIRST_STEP,
# taking RUN's last record of each step (a restarted run appends to metrics.jsonl).
compare_losses() {
  /usr/bin/python3 - "$1" "$2" "$3" "$TOL" <<'EOF'
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line); out[r["step"]] = r["loss"]
    return out
ref, run, first, tol = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
want = [s for s in sorted(ref) if s >= first]
missing = [s for s in want if s not in run]
worst = max((abs(run[s] - ref[s]) / abs(ref[s]) for s in want if s in run), default=float("inf"))
ok = not missing and worst <= tol
print(f"{worst:.2e} {len(want) - len(missing)}/{len(want)} {'PASS' if ok else 'FAIL'}")
EOF
}

rows=()
row() { rows+=("$(printf '%-44s %9s %7s  %-34s %s' "$@")"); }
table() {
  echo
  printf '%-44s %9s %7s  %-34s %s\n' check max_rel steps detail result
  printf '%s\n' "${rows[@]}"
  echo "(max_rel: largest per-step |loss - one-process loss| / loss; tolerance $TOL)"
  local r
  for r in "${rows[@]}"; do [[ $r != *FAIL ]] || return 1; done
}

# ---- scenarios -------------------------------------------------------------------------------

# Judged by the ranks' lines, not mpirun's status: OpenMPI's launcher can crash in its own
# teardown (PMIx_server_finalize) after every rank has finished, which under set -e and
# pipefail ended the whole script without a word.
show_placement() {
  local lines rc=0
  lines=$(launch "$1" 4 sh -c 'echo "  rank $OMPI_COMM_WORLD_RANK: host $(hostname), address $(ip -4 -o addr show eth0 | awk "{print \$4}")"') || rc=$?
  if [[ $(grep -c '^  rank ' <<<"$lines") -ne 4 ]]; then
    printf '%s\n' "$lines"
    die "the placement check did not start 4 ranks (mpirun exit $rc)"
  fi
  ((rc == 0)) || say "mpirun exited $rc after all 4 ranks had printed their placement (its teardown); going on"
  sort <<<"$lines"
}

cmd_compare() {
  "$cluster" hostfile 2 >"$out/hosts"
  say "hosts (hostfile $out/hosts): $(tr '\n' ' ' <"$out/hosts")"
  show_placement "$out/hosts"
  one_process one "$steps"
  local name layout b0 b1 res t0 t1
  for layout in "fsdp4:ici_fsdp_parallelism=4" "fsdp2_ep2:ici_fsdp_parallelism=2 ici_expert_parallelism=2"; do
    name=${layout%%:*}
    local title="2 hosts × 2 ranks, ${name/fsdp2_ep2/fsdp 2 × expert 2}"
    title=${title/fsdp4/fsdp 4}
    b0=$(bytes_through_links); t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    local rc=0
    launch "$out/hosts" 4 "$kiln" train "${MODEL[@]}" steps="$steps" per_device_batch_size=1 local_devices=1 \
      ${layout#*:} enable_checkpointing=true checkpoint_period=$((steps / 2)) run_name="$name" \
      base_output_directory="$out" >"$out/$name.log" 2>&1 || rc=$?
    if ((rc)); then
      tail -20 "$out/$name.log"
      row "$title" - - "exit $rc" FAIL
      continue
    fi
    t1=$(date +%s.%N); b1=$(bytes_through_links)
    res=$(compare_losses "$out/one/metrics.jsonl" "$out/$name/metrics.jsonl" 0)
    read -r rel n verdict <<<"$res"
    # every rank wrote its shard of the last checkpoint into the shared directory
    local shards
    shards=$(ls "$out/$name/checkpoints/$steps" 2>/dev/null | grep -c '^shard-' || true)
    [[ $shards -eq 4 ]] || verdict=FAIL
    row "$title" "$rel" "$n" "$(awk -v b="$((b1 - b0))" -v a="$t0" -v c="$t1" -v s="$shards" \
      'BEGIN{printf "%.1f MB on links, %d shards, %.1f s", b / 1e6, s, c - a}')" "$verdict"
  done
}

cmd_dead_host() {
  # Sequences of 64 and a global batch of 32 make a step take ~0.1 s, so the run is still going
  # when the host dies, in few steps (the one-process reference stays within the tolerance:
  # float sums in another order drift apart over hundreds of steps, as routing flips).
  local name=dead n=$dead_steps period=10 seq=(max_target_length=64)
  "$cluster" hostfile 2 >"$out/hosts"
  one_process dead_ref "$n" "${seq[@]}" per_device_batch_size=32
  say "dead host: fsdp 4 over 2 hosts × 2 ranks, global batch 32 × 64 tokens, $n steps, checkpoint every $period, KILN_COLLECTIVE_TIMEOUT_S=$timeout_s"
  local t_kill t_end rc=0 pid
  launch "$out/hosts" 4 "$kiln" train "${MODEL[@]}" "${seq[@]}" steps="$n" per_device_batch_size=8 local_devices=1 \
    ici_fsdp_parallelism=4 enable_checkpointing=true checkpoint_period=$period run_name=$name \
    base_output_directory="$out" >"$out/$name.log" 2>&1 &
  pid=$!
  # wait for the first checkpoint to be complete (its manifest is written last, by rank 0),
  # then kill at once: the run must still be going (checked below)
  local i
  for ((i = 0; i < 6000; i++)); do
    [[ -f $out/$name/checkpoints/$period/manifest.json ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  [[ -f $out/$name/checkpoints/$period/manifest.json ]] || { wait "$pid" || true; tail -20 "$out/$name.log"; die "no checkpoint $period appeared"; }
  local victims how
  if ((hang)); then
    # a hung host: its ranks stop (SIGSTOP), its daemon and network stay up; only the
    # survivors' collective timeout can notice
    victims=$(for p in $(ip netns pids kiln-h1); do if [[ $(cat /proc/$p/comm 2>/dev/null) != orted ]]; then echo -n "$p "; fi; done)
    how="stopped (SIGSTOP) the kiln ranks of kiln-h1"
    t_kill=$(date +%s.%N)
    # shellcheck disable=SC2086
    kill -STOP $victims
  else
    if ((power_off)); then ip -n kiln-h1 link set eth0 down; fi
    victims=$(ip netns pids kiln-h1 | tr '\n' ' ')
    how="killed every process of kiln-h1"
    if ((power_off)); then how+=" after taking its link down"; fi
    t_kill=$(date +%s.%N)
    # shellcheck disable=SC2086
    kill -9 $victims
  fi
  [[ -n ${victims// /} ]] || die "kiln-h1 has no processes left to kill: the run ended before the kill (use more --dead-steps)"
  say "$how (pids $victims)"
  wait "$pid" || rc=$?
  t_end=$(date +%s.%N)
  if ((power_off)); then ip -n kiln-h1 link set eth0 up; fi
  local stop_s last_step
  stop_s=$(awk -v a="$t_kill" -v b="$t_end" 'BEGIN{printf "%.1f", b - a}')
  last_step=$(grep -o '^completed step: [0-9]*' "$out/$name.log" | tail -1 | awk '{print $3}')
  say "the job ended ${stop_s} s after the kill (exit $rc; last completed step ${last_step:-none}); what the survivors printed:"
  { grep -E 'kiln: error|timed out|lost communication|unexpectedly disconnected|exited on signal|MPI_ABORT' \
    "$out/$name.log" || true; } | head -6 | sed 's/^/    /'
  local stop_verdict=PASS
  [[ $rc -ne 0 ]] || stop_verdict=FAIL
  # the kill must have landed mid-run, before the last step
  [[ -n $last_step && $last_step -lt $((n - 1)) ]] || stop_verdict=FAIL
  awk -v s="$stop_s" -v t="$timeout_s" 'BEGIN{exit !(s <= t + 15)}' || stop_verdict=FAIL
  local mode=killed
  if ((power_off)); then mode=powered-off; fi
  if ((hang)); then mode=hung; fi
  row "$mode host kiln-h1: survivors stop" - - "after ${stop_s} s, exit $rc" "$stop_verdict"

  # Restart on the surviving host: 2 ranks, fsdp 2, the same global batch of 4, from the
  # latest complete checkpoint (resharded from 4 devices to 2 on load): global batch 32.
  local ckpt
  ckpt=$(ls "$out/$name/checkpoints" | grep -E '^[0-9]+$' | sort -n | tail -1)
  # The first line, read with awk to the end: `head -1` exits at once, and the writer's SIGPIPE
  # fails the pipeline under pipefail (exit 141) when it is still writing.
  "$cluster" hostfile 2 | awk 'NR == 1' >"$out/hosts_survivors"
  say "restart on $(cat "$out/hosts_survivors"): 2 ranks, fsdp 2, from checkpoint $ckpt"
  local t0 t1
  t0=$(date +%s.%N)
  rc=0
  launch "$out/hosts_survivors" 2 "$kiln" train "${MODEL[@]}" "${seq[@]}" steps="$n" per_device_batch_size=16 local_devices=1 \
    ici_fsdp_parallelism=2 enable_checkpointing=true checkpoint_period=$period run_name=$name \
    base_output_directory="$out" >"$out/$name.restart.log" 2>&1 || rc=$?
  if ((rc)); then
    tail -20 "$out/$name.restart.log"
    row "restart on kiln-h0 alone (fsdp 2)" - - "exit $rc" FAIL
    return
  fi
  t1=$(date +%s.%N)
  grep -o 'restored the full training state of step [0-9]*' "$out/$name.restart.log" | sed 's/^/    /' || true
  local res rel cnt verdict
  res=$(compare_losses "$out/dead_ref/metrics.jsonl" "$out/$name/metrics.jsonl" 0)
  read -r rel cnt verdict <<<"$res"
  grep -q "restored the full training state of step $ckpt" "$out/$name.restart.log" || verdict=FAIL
  row "restart on kiln-h0 alone (fsdp 2)" "$rel" "$cnt" \
    "$(awk -v c="$ckpt" -v a="$t0" -v b="$t1" 'BEGIN{printf "from step %d, %.1f s", c, b - a}')" "$verdict"
}

cmd_unreachable() {
  local prefix=${KILN_NETNS_PREFIX:-10.77.0} msg
  { "$cluster" hostfile 2 | awk 'NR == 1'; echo "$prefix.99 slots=2"; } >"$out/hosts_missing"
  say "hostfile naming $prefix.99 (no such host):"
  if msg=$(launch "$out/hosts_missing" 4 true 2>&1); then row "unreachable host $prefix.99" - - launched FAIL
  else echo "    $msg"; row "unreachable host $prefix.99" - - "$(wc -l <<<"$msg") line(s) naming it" \
    "$([[ $(wc -l <<<"$msg") -eq 1 && $msg == *"$prefix.99"* ]] && echo PASS || echo FAIL)"; fi
  "$cluster" hostfile 2 >"$out/hosts"
  ip -n kiln-h1 link set eth0 down
  say "kiln-h1 starts commands but its network is down (as behind a firewall):"
  if msg=$(launch "$out/hosts" 4 true 2>&1); then ip -n kiln-h1 link set eth0 up; row "host with its network down ($prefix.2)" - - launched FAIL
  else ip -n kiln-h1 link set eth0 up; echo "    $msg"; row "host with its network down ($prefix.2)" - - "$(wc -l <<<"$msg") line(s) naming it" \
    "$([[ $(wc -l <<<"$msg") -eq 1 && $msg == *"$prefix.2"* ]] && echo PASS || echo FAIL)"; fi
}

# ---- main ------------------------------------------------------------------------------------

while [[ $# -gt 0 ]]; do
  case $1 in
    --kiln) kiln=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --dead-steps) dead_steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --power-off) power_off=1; shift ;;
    --hang) hang=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
command=${1:-}
[[ -n $command ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
shift

if [[ $command == launch ]]; then
  [[ $# -ge 3 ]] || die "launch HOSTFILE NP PROGRAM [ARGS...]"
  launch "$@"
  exit
fi

[[ -x $kiln ]] || die "no kiln binary at $kiln (--kiln PATH or KILN=...)"
kiln=$(readlink -f "$kiln")
"$cluster" check >/dev/null || { "$cluster" check; exit 77; }

brought_up=0
cleanup() {
  rm -f "$launched"
  if ((brought_up)); then "$cluster" down >/dev/null; fi
  if ((!keep)) && [[ -n $out ]]; then rm -rf "$out"; fi
}
trap cleanup EXIT
if [[ -z $(ip netns list | grep -E '^kiln-h[01]( |$)' || true) ]] || [[ $(ip netns list | grep -cE '^kiln-h[01]( |$)') -lt 2 ]]; then
  "$cluster" up 2 >/dev/null
  brought_up=1
fi
if [[ -z $out ]]; then out=$(mktemp -d /tmp/kiln_multihost.XXXXXX); else mkdir -p "$out"; keep=1; fi
out=$(readlink -f "$out")
say "kiln $kiln, output in $out (shared by every host)"

case $command in
  compare) cmd_compare ;;
  dead-host) cmd_dead_host ;;
  unreachable) cmd_unreachable ;;
  all) cmd_compare; cmd_unreachable; cmd_dead_host ;;
  *) die "unknown command $command (compare, dead-host, unreachable, all, launch)" ;;
esac
table
