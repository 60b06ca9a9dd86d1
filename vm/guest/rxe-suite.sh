#!/bin/sh
# The guest's /test.sh of the rxe suite (vm/run-rxe-suite.sh): soft-RoCE (rxe0) on the NIC
# whose frames go over loopback UDP to the host's umlx (the sim's wire), the tools' TCP
# exchange over the second NIC (QEMU user networking: the host is 10.0.2.2, the host reaches
# our port 18515 through hostfwd). /cases.txt holds one case a line:
#   NAME ROLE COMMAND...
# ROLE gs: COMMAND is a server here; we start it, wait until it listens on 18515, print
#          CASE-READY (the host then starts its client) and wait for it.
# ROLE hs: the host starts its server when it sees CASE-START; COMMAND is the client here,
#          given 10.0.2.2, retried while the host is not listening yet.
# Before and after each case the port's hw_counters are printed on COUNTERS lines; the host
# compares them.
for i in /sys/class/net/eth*; do
  case "$(cat "$i/address")" in
    52:54:00:12:00:01) WIRE=$(basename "$i");;
    52:54:00:12:00:02) NAT=$(basename "$i");;
  esac
done
[ -n "$WIRE" ] && [ -n "$NAT" ] || { echo "GUEST-ERROR: NICs not found"; ls /sys/class/net; exit 1; }
ip link set lo up
ip link set "$NAT" up; ip addr add 10.0.2.15/24 dev "$NAT"
ip link set "$WIRE" up; ip addr add 10.99.3.1/24 dev "$WIRE"
rdma link add rxe0 type rxe netdev "$WIRE" || { echo "GUEST-ERROR: rdma link add failed"; dmesg | tail; exit 1; }
rdma link show
ibv_devinfo -d rxe0 -v | grep -E "state|active_mtu|GID\["
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
counters() { # $1 = case, $2 = before|after
  line="COUNTERS $1 $2"
  for f in "$C"/*; do line="$line $(basename "$f")=$(cat "$f")"; done
  echo "$line"
}
listening() { netstat -ltn 2>/dev/null | grep -q ":18515 "; }
rc_all=0
while read -r name role cmd; do
  [ -n "$name" ] || continue
  case "$name" in \#*) continue;; esac
  counters "$name" before
  echo "CASE-START $name"
  t0=$(cut -d' ' -f1 /proc/uptime)
  if [ "$role" = gs ]; then
    $cmd > /tmp/out 2>&1 < /dev/null &
    pid=$!
    n=0; until listening || [ $n -ge 100 ]; do n=$((n+1)); sleep 0.2; done
    echo "CASE-READY $name"
    wait $pid; rc=$?
  else
    n=0
    while :; do
      $cmd 10.0.2.2 > /tmp/out 2>&1 < /dev/null; rc=$?
      if [ $rc != 0 ] && grep -qE "Couldn't connect|Unable to open file descriptor" /tmp/out && [ $n -lt 60 ]; then
        n=$((n+1)); sleep 1; continue
      fi
      break
    done
  fi
  sleep 1
  counters "$name" after
  sed "s/^/GUEST-OUT $name: /" /tmp/out
  echo "CASE-END $name rc=$rc time=$(awk -v t0="$t0" '{printf "%.1f", $1 - t0}' /proc/uptime)s"
  [ $rc = 0 ] || rc_all=1
done < /cases.txt
rdma statistic show link rxe0/1
exit $rc_all
