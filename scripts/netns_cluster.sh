#!/usr/bin/env bash
# A cluster of N "hosts" on one Linux machine: network namespaces kiln-h0..kiln-h{N-1}, each
# with its own address on a private subnet, joined by a bridge in the root namespace. The
# namespaces share the filesystem (like a cluster's shared checkpoint directory) and nothing
# else that MPI may use between hosts: OpenMPI starts one daemon per host through the `agent`
# subcommand (its plm_rsh_agent, in place of ssh) and the ranks talk over TCP through the
# bridge. docs/multihost.md shows how it is used.
#
#   scripts/netns_cluster.sh check             # exit 0 if namespaces can be made here, else 77 and why
#   scripts/netns_cluster.sh up N              # hosts kiln-h0..kiln-h{N-1} at 10.77.0.1..N
#   scripts/netns_cluster.sh hostfile [SLOTS]  # an OpenMPI hostfile of the hosts (stdout)
#   scripts/netns_cluster.sh mpi_args          # the mpirun flags for this cluster (stdout, one a line)
#   scripts/netns_cluster.sh traffic           # bytes through each host's link
#   scripts/netns_cluster.sh agent HOST CMD..  # run CMD on HOST as ssh would (OpenMPI calls this)
#   scripts/netns_cluster.sh down              # remove everything (idempotent; cleans after a crash)
#
# Environment: KILN_NETNS_PREFIX (default 10.77.0: hosts at .1.., the root namespace at .254).
set -euo pipefail

readonly prefix=${KILN_NETNS_PREFIX:-10.77.0}
readonly bridge=kiln-br0
readonly root_addr=${prefix}.254
readonly subnet=${prefix}.0/24
readonly self=$(readlink -f "${BASH_SOURCE[0]}")

die() { echo "netns_cluster: error: $*" >&2; exit 1; }

hosts() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^kiln-h[0-9]+$' | sort -t h -k 2 -n || true; }

cmd_check() {
  local why=""
  if ! command -v ip >/dev/null; then
    why="iproute2 (the ip command) is not installed"
  elif ! ip netns add kiln-probe 2>/tmp/kiln-netns-probe.$$; then
    why="cannot create a network namespace (needs root or CAP_NET_ADMIN + CAP_SYS_ADMIN): $(head -1 /tmp/kiln-netns-probe.$$)"
  elif ! ip link add kiln-probe0 type veth peer name kiln-probe1 2>/tmp/kiln-netns-probe.$$; then
    why="cannot create a veth pair: $(head -1 /tmp/kiln-netns-probe.$$)"
  fi
  ip link del kiln-probe0 2>/dev/null || true
  ip netns del kiln-probe 2>/dev/null || true
  rm -f /tmp/kiln-netns-probe.$$
  if [[ -z $why ]] && ! command -v mpirun >/dev/null; then why="mpirun (OpenMPI) is not installed"; fi
  if [[ -n $why ]]; then echo "netns_cluster: cannot run here: $why"; exit 77; fi
  echo "netns_cluster: network namespaces, veth pairs and mpirun are available"
}

cmd_down() {
  local ns
  for ns in $(hosts); do
    # Processes left in a host (a crashed run) would keep its namespace alive: end them first.
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then kill -9 $pids 2>/dev/null || true; fi
    ip netns del "$ns" 2>/dev/null || true
  done
  # A veth's root end goes with its namespace; remove strays and the bridge.
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^kiln-v[0-9]+$' || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  if [[ -f /run/kiln-netns-bridge-nf ]]; then
    cat /run/kiln-netns-bridge-nf >/proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || true
    rm -f /run/kiln-netns-bridge-nf
  fi
}

cmd_up() {
  local n=${1:-}
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 250 ]] || die "up N: N must be 1..250, got '${n}'"
  cmd_down
  ip link add "$bridge" type bridge
  ip addr add "${root_addr}/24" dev "$bridge"
  ip link set "$bridge" up
  # With br_netfilter loaded, bridged frames pass the host's iptables; the bridge is ours alone.
  # (The previous value is put back by `down`.)
  local nf=/proc/sys/net/bridge/bridge-nf-call-iptables
  if [[ -w $nf ]] && [[ $(cat "$nf") != 0 ]]; then
    cat "$nf" >/run/kiln-netns-bridge-nf && echo 0 >"$nf" 2>/dev/null || true
  fi
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=kiln-h$i
    ip netns add "$ns"
    ip link add "kiln-v$i" type veth peer name eth0 netns "$ns"
    ip link set "kiln-v$i" master "$bridge" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "${prefix}.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  for ((i = 0; i < n; i++)); do
    ip netns exec "kiln-h$i" true || die "kiln-h$i does not run commands"
  done
  echo "netns_cluster: $n hosts up: $(for ((i = 0; i < n; i++)); do printf 'kiln-h%d=%s.%d ' "$i" "$prefix" $((i + 1)); done)(launcher ${root_addr}, bridge $bridge)"
}

cmd_hostfile() {
  local slots=${1:-2} ns
  [[ -n $(hosts) ]] || die "no hosts: run '$0 up N' first"
  for ns in $(hosts); do echo "${prefix}.$((${ns#kiln-h} + 1)) slots=$slots"; done
}

cmd_mpi_args() {
  # ob1 over TCP between hosts (never shared memory, never UCX), the daemons' out-of-band
  # channel on the same subnet, and this script in place of ssh. TCP keepalives on that
  # channel let mpirun notice a host that vanished (no reset: power loss, cable) in ~16 s;
  # OpenMPI's default (300 s idle + 9 × 20 s) leaves mpirun waiting 8 minutes for it.
  printf '%s\n' --mca plm_rsh_agent "$self agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3
}

cmd_traffic() {
  local ns i
  printf '%-8s %-12s %14s %14s\n' host address rx_bytes tx_bytes
  for ns in $(hosts); do
    i=${ns#kiln-h}
    printf '%-8s %-12s %14s %14s\n' "$ns" "${prefix}.$((i + 1))" \
      "$(cat /sys/class/net/kiln-v$i/statistics/tx_bytes)" "$(cat /sys/class/net/kiln-v$i/statistics/rx_bytes)"
  done
}

cmd_agent() {
  # Called as ssh would be: [options] HOST COMMAND... (OpenMPI passes the remote command as
  # words for a remote shell). The command runs in the host's namespace, with its own
  # hostname (UTS namespace) and a clean environment, as after an ssh login: what the ranks
  # need must come through mpirun -x, as on a real cluster.
  while [[ $# -gt 0 && $1 == -* ]]; do shift; done
  [[ $# -ge 2 ]] || die "agent: usage: agent HOST COMMAND..."
  local host=$1 ns
  shift
  case $host in
    kiln-h[0-9]*) ns=$host ;;
    "${prefix}".*) ns=kiln-h$((${host##*.} - 1)) ;;
    *) ns="" ;;
  esac
  # awk reads the whole list: `grep -q` would stop at the match, and under pipefail the
  # writer's SIGPIPE would read as "no such namespace".
  if [[ -z $ns ]] || ! ip netns list | awk -v ns="$ns" '$1 == ns { found = 1 } END { exit !found }'; then
    echo "ssh: connect to host $host port 22: No route to host (netns_cluster: no namespace for $host)" >&2
    exit 255
  fi
  exec ip netns exec "$ns" unshare --uts -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="${HOME:-/root}" \
    USER="${USER:-root}" /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$ns" "$*"
}

case ${1:-} in
  check) cmd_check ;;
  up) cmd_up "${2:-}" ;;
  down) cmd_down; echo "netns_cluster: down" ;;
  hostfile) cmd_hostfile "${2:-2}" ;;
  mpi_args) cmd_mpi_args ;;
  traffic) cmd_traffic ;;
  agent) shift; cmd_agent "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
