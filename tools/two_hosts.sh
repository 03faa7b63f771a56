#!/usr/bin/env bash
# Copyright 2026 The async_rl_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Two (or more) "hosts" on one Linux machine: network namespaces joined through a switch, for
# trying the several-hosts set-up of docs/ros.md and its faults (packet loss, a cut link).
#
#   arl_learner (10.77.0.1/24)  --veth--+
#                                        +-- bridge in arl_link (the "switch")
#   arl_workers (10.77.0.2/24)  --veth--+   (arl_workers2 10.77.0.3, ... with `up N`)
#
# Every host's interface is called arl0, so the one shipped Cyclone DDS file
# (async_rl_ros/config/cyclonedds_two_hosts.xml) fits every host. Faults are made in the
# switch namespace only, on the switch ports, so both directions of every link see them:
#   loss PCT   drop PCT % of the packets in each direction (tc netem when the kernel has
#              sch_netem, else an nftables netdev egress rule: numgen random mod 100 < PCT)
#   cut SECS   take the switch ports down for SECS seconds: every host's arl0 loses its
#              carrier (as when a cable is pulled) but keeps its address and routes
# Needs root, iproute2 (ip, tc) and, without sch_netem, nftables.
set -euo pipefail

PREFIX=${ARL_NETNS_PREFIX:-arl}
SUBNET=${ARL_SUBNET:-10.77.0}
LEARNER=${PREFIX}_learner
SWITCH=${PREFIX}_link
BRIDGE=br0
IFACE=arl0
REPO=$(cd "$(dirname "$0")/.." && pwd)
CYCLONE_XML=${ARL_CYCLONE_XML:-$REPO/async_rl_ros/config/cyclonedds_two_hosts.xml}

usage() {
  cat <<EOF
usage: $(basename "$0") COMMAND [ARGS]

  up [N]            create namespaces $LEARNER ($SUBNET.1) and N worker hosts (default 1:
                    ${PREFIX}_workers $SUBNET.2; then ${PREFIX}_workers2 $SUBNET.3, ...), each
                    with loopback up and interface $IFACE on the switch namespace $SWITCH
  down              remove every namespace made by 'up' (and what is in them); idempotent
  loss PCT          drop PCT % of the packets in each direction on every link (0: none)
  cut SECONDS       take every link down for SECONDS seconds, then up again
  status            namespaces, addresses, link state and the loss rule in force
  exec HOST CMD...  run CMD in host HOST (learner, workers, workers2, ...) with DDS set up
                    for it: CYCLONEDDS_URI=file://$CYCLONE_XML (plus a Peer per
                    further worker host), ARL_DDS_INTERFACE=$IFACE, ARL_LEARNER_HOST=$SUBNET.1,
                    ARL_WORKER_HOST=$SUBNET.2, ROS_LOCALHOST_ONLY and
                    ROS_AUTOMATIC_DISCOVERY_RANGE unset

Environment: ARL_NETNS_PREFIX (default arl), ARL_SUBNET (default 10.77.0),
ARL_CYCLONE_XML (default the shipped file). Needs root.
EOF
}

die() {
  echo "two_hosts: $*" >&2
  exit 1
}

in_ns() {
  ip netns exec "$1" "${@:2}"
}

hosts() {  # the host namespaces that exist, learner first
  ip netns list | awk '{print $1}' | grep -E "^${PREFIX}_(learner|workers[0-9]*)$" | sort
}

ports() {  # the switch ports
  in_ns "$SWITCH" ip -o link show master "$BRIDGE" 2>/dev/null |
    awk -F': ' '{sub(/@.*/, "", $2); print $2}'
}

require_up() {
  ip netns list | grep -qE "^${SWITCH}( |$)" || die "not set up: run '$0 up' first"
}

cmd_up() {
  local n=${1:-1}
  [[ $n =~ ^[1-9][0-9]*$ && $n -le 200 ]] || die "up: N must be 1 .. 200, not '$n'"
  if ip netns list | grep -qE "^${SWITCH}( |$)"; then
    die "already up (run '$0 down' first)"
  fi
  ip netns add "$SWITCH"
  in_ns "$SWITCH" ip link set lo up
  in_ns "$SWITCH" ip link add "$BRIDGE" type bridge
  in_ns "$SWITCH" ip link set "$BRIDGE" up
  local i name addr port
  for ((i = 0; i <= n; i++)); do
    if ((i == 0)); then name=$LEARNER; port=p_learner
    elif ((i == 1)); then name=${PREFIX}_workers; port=p_workers
    else name=${PREFIX}_workers$i; port=p_workers$i; fi
    addr=$SUBNET.$((i + 1))
    ip netns add "$name"
    in_ns "$name" ip link set lo up
    in_ns "$SWITCH" ip link add "$port" type veth peer name "$IFACE" netns "$name"
    in_ns "$SWITCH" ip link set "$port" master "$BRIDGE" up
    in_ns "$name" ip addr add "$addr/24" dev "$IFACE"
    in_ns "$name" ip link set "$IFACE" up
    echo "two_hosts: $name $addr ($IFACE)"
  done
  if command -v ping >/dev/null; then  # the first ping also fills the ARP caches
    for name in $(hosts); do
      [ "$name" = "$LEARNER" ] && continue
      in_ns "$name" ping -c 1 -W 5 "$SUBNET.1" >/dev/null ||
        die "$name cannot reach $SUBNET.1"
    done
  fi
  echo "two_hosts: up; run commands with: $0 exec learner|workers CMD..."
}

cmd_down() {
  local name
  for name in $(ip netns list | awk '{print $1}' |
                grep -E "^${PREFIX}_(learner|workers[0-9]*|link)$" || true); do
    # end what still runs there (started in the namespace, by anyone), then the namespace
    local pids
    pids=$(ip netns pids "$name" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      sleep 2
      pids=$(ip netns pids "$name" 2>/dev/null || true)
      if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
      fi
    fi
    ip netns del "$name"
    echo "two_hosts: removed $name"
  done
}

have_netem() {  # whether this kernel takes a netem qdisc (sch_netem built in or loadable)
  local port=$1
  if in_ns "$SWITCH" tc qdisc replace dev "$port" root netem loss 0% 2>/dev/null; then
    in_ns "$SWITCH" tc qdisc del dev "$port" root 2>/dev/null || true
    return 0
  fi
  return 1
}

clear_loss() {
  local port
  for port in $(ports); do
    in_ns "$SWITCH" tc qdisc del dev "$port" root 2>/dev/null || true
  done
  in_ns "$SWITCH" nft delete table netdev arl_loss 2>/dev/null || true
}

cmd_loss() {
  local pct=${1:-}
  [[ $pct =~ ^[0-9]+$ && $pct -le 100 ]] || die "loss: PCT must be 0 .. 100, not '$pct'"
  require_up
  clear_loss
  if [ "$pct" = 0 ]; then
    echo 'two_hosts: no loss'
    return
  fi
  local port first
  first=$(ports | head -n 1)
  if have_netem "$first"; then
    for port in $(ports); do
      in_ns "$SWITCH" tc qdisc add dev "$port" root netem loss "$pct%"
    done
    echo "two_hosts: netem loss $pct % in each direction"
    return
  fi
  command -v nft >/dev/null ||
    die 'the kernel has no sch_netem and nft is missing: install nftables'
  in_ns "$SWITCH" nft add table netdev arl_loss
  for port in $(ports); do
    in_ns "$SWITCH" nft add chain netdev arl_loss "out_$port" \
      "{ type filter hook egress device \"$port\" priority 0; }"
    in_ns "$SWITCH" nft add rule netdev arl_loss "out_$port" \
      numgen random mod 100 '<' "$pct" counter drop
  done
  echo "two_hosts: loss $pct % in each direction (nftables; this kernel has no sch_netem)"
}

links() {  # set every switch port up or down
  local port
  for port in $(ports); do in_ns "$SWITCH" ip link set "$port" "$1"; done
}

cmd_cut() {
  local secs=${1:-}
  [[ $secs =~ ^[0-9]+([.][0-9]+)?$ ]] || die "cut: SECONDS must be a number, not '$secs'"
  require_up
  links down
  echo "two_hosts: links down at $(date +%T.%N | cut -c1-12) for $secs s"
  trap 'links up' EXIT  # back up even if this script is interrupted
  sleep "$secs"
  links up
  trap - EXIT
  echo "two_hosts: links up at $(date +%T.%N | cut -c1-12)"
}

cmd_status() {
  require_up
  local name
  for name in $(hosts); do
    echo "$name: $(in_ns "$name" ip -o -4 addr show dev "$IFACE" | awk '{print $4}')" \
      "$(in_ns "$name" ip -o link show dev "$IFACE" | grep -o 'state [A-Z]*')"
  done
  in_ns "$SWITCH" tc qdisc show | grep netem || true
  in_ns "$SWITCH" nft list table netdev arl_loss 2>/dev/null | grep numgen || true
}

cmd_exec() {
  local host=${1:-}
  if [ -z "$host" ] || [ $# -lt 2 ]; then die 'exec: HOST and CMD needed'; fi
  shift
  require_up
  local name=${PREFIX}_$host
  hosts | grep -qx "$name" || die "exec: no host $host (namespaces: $(hosts | xargs))"
  [ -f "$CYCLONE_XML" ] || die "exec: no Cyclone DDS file $CYCLONE_XML"
  local uri="file://$CYCLONE_XML" more="" i=2 other
  for other in $(hosts); do  # worker hosts beyond the first: peers of every host
    case "$other" in
      "${PREFIX}"_workers[0-9]*)
        i=${other#"${PREFIX}"_workers}
        more+="<Peer address=\"$SUBNET.$((i + 1))\"/>" ;;
    esac
  done
  [ -n "$more" ] && uri+=",<Discovery><Peers>$more</Peers></Discovery>"
  exec ip netns exec "$name" env -u ROS_LOCALHOST_ONLY -u ROS_AUTOMATIC_DISCOVERY_RANGE \
    RMW_IMPLEMENTATION=rmw_cyclonedds_cpp CYCLONEDDS_URI="$uri" ARL_DDS_INTERFACE="$IFACE" \
    ARL_LEARNER_HOST="$SUBNET.1" ARL_WORKER_HOST="$SUBNET.2" "$@"
}

main() {
  local cmd=${1:-}
  [ $# -gt 0 ] && shift
  case "$cmd" in
    up|down|loss|cut|status|exec)
      [ "$(id -u)" = 0 ] || die 'needs root (network namespaces)'
      "cmd_$cmd" "$@" ;;
    -h|--help|help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
