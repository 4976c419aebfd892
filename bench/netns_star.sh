# Sourced by the bench/*_netns.sh scripts: M machines made of network namespaces, each
# joined to a bridge (in a namespace of its own, the "switch") by a veth pair whose both ends
# are shaped with tc tbf to RATE (the machine's link, both directions).
#
#   star_up PREFIX SUBNET M RATE   machine k is namespace ${PREFIX}${k}_$$ with address
#                                  SUBNET.(k+1)/24 (e.g. SUBNET=10.234.0); returns 1 on error
#   star_down PREFIX M             deletes the namespaces (and with them the links)

star_up() {
  local prefix=$1 subnet=$2 m=$3 rate=$4 k ns
  local sw=${prefix}SW$$
  ip netns add "$sw" || return 1
  ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up && ip -n "$sw" link set lo up || return 1
  for k in $(seq 0 $((m - 1))); do
    ns=${prefix}${k}_$$
    ip netns add "$ns" || return 1
    ip link add "h${k}_$$" type veth peer name "s${k}_$$" || return 1
    ip link set "h${k}_$$" netns "$ns" && ip link set "s${k}_$$" netns "$sw" || return 1
    ip -n "$ns" addr add "$subnet.$((k + 1))/24" dev "h${k}_$$" && ip -n "$ns" link set "h${k}_$$" up || return 1
    ip -n "$ns" link set lo up
    ip -n "$sw" link set "s${k}_$$" master br0 && ip -n "$sw" link set "s${k}_$$" up || return 1
    ip netns exec "$ns" tc qdisc add dev "h${k}_$$" root tbf rate "$rate" burst 256kb latency 400ms || return 1
    ip netns exec "$sw" tc qdisc add dev "s${k}_$$" root tbf rate "$rate" burst 256kb latency 400ms || return 1
  done
}

star_down() {
  local prefix=$1 m=$2 k
  for k in $(seq 0 $((m - 1))); do ip netns del "${prefix}${k}_$$" 2>/dev/null; done
  ip netns del "${prefix}SW$$" 2>/dev/null
}
