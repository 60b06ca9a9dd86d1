#!/usr/bin/env bash
# The rxe suite: umlx's software ConnectX (the sim embedded in the umlx tools) against Linux
# soft-RoCE (rdma_rxe) and rdma-core's own tools, over a real RoCEv2 wire.
#
#   bash vm/run-rxe-suite.sh          # a few minutes; exit status 0 only if every case passed
#
# A QEMU guest (TCG, no KVM needed) runs rdma_rxe on a virtio NIC whose Ethernet frames QEMU
# carries one per UDP datagram over loopback (-netdev socket,udp=127.0.0.1:A,localaddr=
# 127.0.0.1:B); on the host, each case's umlx process puts its sim's port on that same wire
# (`--wire udp:127.0.0.1:A,127.0.0.1:B --ip 10.99.3.2`, rxe0 is 10.99.3.1), so every frame
# between rxe and the sim is real RoCEv2 (ARP, IPv4, UDP 4791, BTH, ICRC). The tools' TCP
# exchange goes over a second guest NIC on QEMU user networking: the guest reaches the host at
# 10.0.2.2, the host reaches the guest's port 18515 through hostfwd.
#
# Each case runs twice: server in the guest (rdma-core / perftest) with the umlx client on the
# host, then server on the host with the rdma-core / perftest client in the guest. A case passes
# when both sides exit 0 (the ping-pongs with -c: received data verified), rxe's hw_counters
# show no increase of an error counter, and the host side's pcap (kept in the log dir) decodes
# with `umlx wire decode` to RoCEv2 frames with no bad ICRC and nothing malformed.
#
# Works with no standard input. Needs root only to install missing packages with apt-get.
# Env: UMLX_VM_DIR (downloads and images, default /tmp/umlx-vm), UMLX_VM_LOGS (default
# $UMLX_VM_DIR/logs/rxe-<time>), UMLX_VM_TIMEOUT (seconds for the VM, default 900),
# UMLX_RXE_PORT (first of the four loopback ports used, default 15811: the wire's two UDP
# ports, the hostfwd TCP port, the host server's TCP port), UMLX_RXE_CASES (a regex: run only
# the matching cases), UMLX_RXE_TEST (another guest script, for debugging).
set -euo pipefail
exec </dev/null
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=vm/common.sh
. "$ROOT/vm/common.sh"
W=${UMLX_VM_DIR:-/tmp/umlx-vm}
LOGS=${UMLX_VM_LOGS:-$W/logs/rxe-$(date +%Y%m%d-%H%M%S)}
TIMEOUT=${UMLX_VM_TIMEOUT:-900}
P0=${UMLX_RXE_PORT:-15811}
WIRE_A=$P0              # guest frames arrive here (the host umlx binds it)
WIRE_B=$((P0 + 1))      # QEMU's end of the wire (the host umlx sends here)
FWD=$((P0 + 2))         # host 127.0.0.1:FWD -> guest :18515 (hostfwd)
HPORT=$((P0 + 3))       # the host servers' TCP port (the guest connects to 10.0.2.2:HPORT)
mkdir -p "$LOGS"
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }
echo "== rxe suite: logs in $LOGS"

# The cases: NAME | guest command (rdma-core, perftest) | host command (umlx). Both sides get
# the same options; the roles (server/client, ports, addresses) are added below.
CASES=(
  "rc-pingpong|ibv_rc_pingpong -d rxe0 -g 1 -c -n 50|rc-pingpong -g 1 -c -n 50"
  "rc-pingpong-20000|ibv_rc_pingpong -d rxe0 -g 1 -c -n 20 -s 20000|rc-pingpong -g 1 -c -n 20 -s 20000"
  "ud-pingpong|ibv_ud_pingpong -d rxe0 -g 1 -c -n 50 -s 1024|ud-pingpong -g 1 -c -n 50 -s 1024"
  "write-bw|ib_write_bw -d rxe0 -x 1 -s 16384 -n 400 -t 2 -u 18|perf write-bw -x 1 -s 16384 -n 400 -t 2 -u 18"
  "read-bw|ib_read_bw -d rxe0 -x 1 -s 16384 -n 400 -o 2 -u 18|perf read-bw -x 1 -s 16384 -n 400 -o 2 -u 18"
  "send-lat|ib_send_lat -d rxe0 -x 1 -n 200 -u 18|perf send-lat -x 1 -n 200 -u 18"
)
# rxe's error counters (/sys/class/infiniband/rxe0/ports/1/hw_counters). These mean a protocol
# error (a NAK or RNR NAK we sent, a retry limit reached, a failed send): any increase fails.
ERROR_COUNTERS="rcvd_seq_err rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err send_err
 link_downed"
# These count recovery from a lost frame (duplicate_request: a retransmission reached rxe;
# out_of_seq_request: a PSN gap, i.e. a frame dropped between the sim and rxe; completer_retry_err:
# rxe retransmitted, after a gap in responses or a retransmit-timer expiry). Under TCG the
# loopback path drops frames now and then (QEMU's UDP socket fills while the vCPU is busy) and
# rxe's retransmit timer fires spuriously (see vm/README.md), so a few are tolerated; a storm,
# more than RECOVERY_BUDGET_PCT percent of the case's rxe packets (at least 3), fails.
RECOVERY_COUNTERS="duplicate_request out_of_seq_request completer_retry_err"
RECOVERY_BUDGET_PCT=${UMLX_RXE_RECOVERY_PCT:-1}

# 1. The guest's kernel and base initramfs (rdma_rxe, rdma-core, perftest).
echo "== building the guest (log: $LOGS/build-guest.log)"
if ! bash "$ROOT/vm/build-rxe-guest.sh" > "$LOGS/build-guest.log" 2>&1; then
  tail -20 "$LOGS/build-guest.log"
  echo "rxe suite: FAILED (building the guest; log $LOGS/build-guest.log)"
  exit 1
fi
tail -1 "$LOGS/build-guest.log"
echo "   (guest ready at $(elapsed))"

# 2. The umlx binary (it runs on the host only).
build_umlx "rxe suite"
echo "   ($BIN ready at $(elapsed))"

# 3. The case list: each case server-in-guest (gs), then server-on-host (hs).
OV=$W/overlay-rxe
rm -rf "$OV"; mkdir -p "$OV"
declare -A HOSTCMD ROLE
NAMES=()
for c in "${CASES[@]}"; do
  IFS='|' read -r name gcmd hcmd <<< "$c"
  if [ -n "${UMLX_RXE_CASES:-}" ] && ! [[ $name =~ $UMLX_RXE_CASES ]]; then continue; fi
  NAMES+=("$name.guest-server" "$name.host-server")
  ROLE[$name.guest-server]=gs; ROLE[$name.host-server]=hs
  echo "$name.guest-server gs timeout 60 $gcmd" >> "$OV/cases.txt"
  echo "$name.host-server hs timeout 60 $gcmd -p $HPORT" >> "$OV/cases.txt"
  HOSTCMD[$name.guest-server]="$hcmd -p $FWD 127.0.0.1"
  HOSTCMD[$name.host-server]="$hcmd -p $HPORT"
done
[ ${#NAMES[@]} -gt 0 ] || { echo "rxe suite: FAILED (no case matches UMLX_RXE_CASES=$UMLX_RXE_CASES)"; exit 1; }
install -m 755 "${UMLX_RXE_TEST:-$ROOT/vm/guest/rxe-suite.sh}" "$OV/test.sh"
{ cat "$W/initramfs-rxe.cpio.gz"; (cd "$OV" && find . | cpio -o -H newc --quiet | gzip -1); } > "$W/initrd-rxe.cpio.gz"

# The host side of one case: umlx with its sim on the guest's wire, recording a pcap.
host_side() { # NAME
  local n=$1 w sub=() rest=()
  # shellcheck disable=SC2086 # the command is a word list
  for w in ${HOSTCMD[$n]}; do
    if [ ${#rest[@]} -eq 0 ] && [[ $w != -* ]]; then sub+=("$w"); else rest+=("$w"); fi
  done
  timeout -k 5 200 "$BIN" "${sub[@]}" -d sim --wire "udp:127.0.0.1:$WIRE_A,127.0.0.1:$WIRE_B" \
    --ip 10.99.3.2 --pcap "$LOGS/$n.pcap" "${rest[@]}" > "$LOGS/$n.host.log" 2>&1
}

# 4. One boot; the host follows the console and plays its side of each case.
echo "== booting (TCG, q35; console: $LOGS/console.log)"
QEMU=(qemu-system-x86_64 -accel tcg,thread=multi -machine q35 -cpu max -smp 1 -m 1G
  -nodefaults -display none -monitor none -no-reboot -serial "file:$LOGS/console.log"
  -netdev "socket,id=wire,udp=127.0.0.1:$WIRE_A,localaddr=127.0.0.1:$WIRE_B"
  -device virtio-net-pci,netdev=wire,mac=52:54:00:12:00:01,romfile=
  -netdev "user,id=nat,net=10.0.2.0/24,hostfwd=tcp:127.0.0.1:$FWD-:18515"
  -device virtio-net-pci,netdev=nat,mac=52:54:00:12:00:02,romfile=
  -kernel "$W/vmlinuz" -initrd "$W/initrd-rxe.cpio.gz"
  -append "console=ttyS0 panic=-1 quiet loglevel=4")
printf '%q ' "${QEMU[@]}" > "$LOGS/qemu-cmdline.txt"
: > "$LOGS/console.log"
tboot=$(date +%s)
timeout -k 10 "$TIMEOUT" "${QEMU[@]}" > "$LOGS/qemu.log" 2>&1 &
qpid=$!
tail -n +1 -f --pid=$qpid "$LOGS/console.log" | while IFS= read -r line; do
  line=${line%$'\r'}
  case "$line" in
    CASE-START\ *|CASE-READY\ *|CASE-END\ *|GUEST-*|PASS*|FAIL*) echo "   guest: $line";;
  esac
  set -- $line
  case "$line" in
    "CASE-START "*)
      if [ "${ROLE[$2]:-}" = hs ]; then
        (host_side "$2"; echo $? > "$LOGS/$2.host-rc") &
        echo $! > "$LOGS/.server-pid"
      fi;;
    "CASE-READY "*)
      rc=0; host_side "$2" || rc=$?
      echo $rc > "$LOGS/$2.host-rc";;
    "CASE-END "*)
      if [ "${ROLE[$2]:-}" = hs ] && [ -f "$LOGS/.server-pid" ]; then
        spid=$(cat "$LOGS/.server-pid")
        for _ in $(seq 1 60); do kill -0 "$spid" 2>/dev/null || break; sleep 1; done
        rm -f "$LOGS/.server-pid"
      fi;;
    "GUEST-TEST-END "*) ;;
  esac
done
qrc=0
wait $qpid || qrc=$?
echo "== VM ran $(($(date +%s) - tboot)) s, qemu exit status $qrc (QEMU's own messages: $LOGS/qemu.log)"

# 5. Verdict, one line per case.
C=$LOGS/console.clean.log
tr -d '\r' < "$LOGS/console.log" > "$C"
problems=()
[ "$qrc" = 0 ] || problems+=("qemu exited with status $qrc$([ "$qrc" = 124 ] && echo " (timeout after $TIMEOUT s)")")
grep -q '^GUEST-TEST-END ' "$C" || problems+=("the guest did not finish (no GUEST-TEST-END line)")
: > "$LOGS/results.txt"
nfail=0
for n in "${NAMES[@]}"; do
  why=(); v2=""; bad=""; mal=""
  end=$(grep -m1 "^CASE-END $n " "$C" || true)
  grc=$(echo "$end" | sed -n 's/.* rc=\([0-9]*\).*/\1/p')
  gtime=$(echo "$end" | sed -n 's/.* time=\([^ ]*\).*/\1/p')
  [ -n "$end" ] || why+=("the guest never finished it")
  [ -z "$end" ] || [ "$grc" = 0 ] || why+=("guest side rc=$grc")
  hrc=$(cat "$LOGS/$n.host-rc" 2>/dev/null || echo none)
  [ "$hrc" = 0 ] || why+=("host side rc=$hrc")
  grep "^GUEST-OUT $n: " "$C" | sed "s/^GUEST-OUT $n: //" > "$LOGS/$n.guest.log" || true
  # rxe's counters, before and after
  before=$(grep -m1 "^COUNTERS $n before " "$C" || true)
  after=$(grep -m1 "^COUNTERS $n after " "$C" || true)
  incr=""
  for k in $ERROR_COUNTERS; do
    b=$(echo "$before" | tr ' ' '\n' | sed -n "s/^$k=//p")
    a=$(echo "$after" | tr ' ' '\n' | sed -n "s/^$k=//p")
    [ -n "$a" ] && [ -n "$b" ] || continue
    [ "$a" -gt "$b" ] && incr="$incr $k+$((a - b))"
  done
  [ -z "$incr" ] || why+=("rxe error counters rose:$incr")
  [ -n "$after" ] || why+=("no rxe counters")
  pk() { local v; v=$(echo "$after" | tr ' ' '\n' | sed -n "s/^$1=//p"); echo "${v:-0}"; }
  pb() { local v; v=$(echo "$before" | tr ' ' '\n' | sed -n "s/^$1=//p"); echo "${v:-0}"; }
  rxe_tx=$(( $(pk sent_pkts) - $(pb sent_pkts) ))
  rxe_rx=$(( $(pk rcvd_pkts) - $(pb rcvd_pkts) ))
  rec=0; recs=""
  for k in $RECOVERY_COUNTERS; do
    d=$(( $(pk $k) - $(pb $k) ))
    [ "$d" -gt 0 ] && { rec=$((rec + d)); recs="$recs $k+$d"; }
  done
  budget=$(( (rxe_tx + rxe_rx) * RECOVERY_BUDGET_PCT / 100 )); [ "$budget" -ge 3 ] || budget=3
  [ "$rec" -le "$budget" ] || why+=("rxe recovery counters rose beyond $budget:$recs")
  # the pcap
  sum=""
  if [ -s "$LOGS/$n.pcap" ]; then
    "$BIN" wire decode "$LOGS/$n.pcap" > "$LOGS/$n.decode.txt" 2>&1 || why+=("umlx wire decode failed")
    sum=$(grep '^summary:' "$LOGS/$n.decode.txt" || true)
    v2=$(echo "$sum" | sed -n 's/.* rocev2=\([0-9]*\).*/\1/p')
    bad=$(echo "$sum" | sed -n 's/.* icrc_bad=\([0-9]*\).*/\1/p')
    mal=$(echo "$sum" | sed -n 's/.* malformed=\([0-9]*\).*/\1/p')
    [ "${v2:-0}" -gt 0 ] || why+=("no RoCEv2 frame in the pcap")
    [ "${bad:-x}" = 0 ] || why+=("pcap: icrc_bad=${bad:-?}")
    [ "${mal:-x}" = 0 ] || why+=("pcap: malformed=${mal:-?}")
  else
    why+=("no pcap")
  fi
  info="guest ${gtime:-?}, rxe sent $rxe_tx rcvd $rxe_rx pkts, recovered:${recs:- none}, pcap rocev2=${v2:-?} icrc_bad=${bad:-?}"
  if [ ${#why[@]} -eq 0 ]; then
    echo "PASS $n ($info)" | tee -a "$LOGS/results.txt"
  else
    nfail=$((nfail + 1))
    echo "FAIL $n: $(IFS=';'; echo "${why[*]}") ($info; logs $LOGS/$n.*)" | tee -a "$LOGS/results.txt"
  fi
done
[ "$nfail" = 0 ] || problems+=("$nfail case(s) failed")
if [ ${#problems[@]} -eq 0 ]; then
  echo "rxe suite: PASSED ${#NAMES[@]} cases in $(elapsed) (logs: $LOGS)"
  exit 0
fi
printf '  - %s\n' "${problems[@]}"
echo "rxe suite: FAILED in $(elapsed) (logs: $LOGS)"
exit 1
