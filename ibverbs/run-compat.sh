#!/usr/bin/env bash
# Runs unmodified RDMA programs (Debian's ibverbs-utils and perftest) on umlx's libibverbs.so.1
# through LD_LIBRARY_PATH, two processes each, and checks their exit status and result lines:
#   ibv_devices; ibv_devinfo -v;
#   ibv_rc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong -g 1 -c, polled on the default device (a
#   sim on the automatic loopback wire) and with completion events (-e) on a named UDP wire;
#   ibv_uc_pingpong and ibv_xsrq_pingpong failing cleanly;
#   perftest's eight RC tests with -x 1, ib_send_lat, ib_read_lat and ib_send_bw in event
#   mode (-e), ib_write_bw -a, ib_read_bw -a, and ib_write_bw, ib_send_bw of 64 B;
#   mixed pairs: rdma-core programs against umlx rc-pingpong and umlx perf;
#   UCX: ucx_info -d, ucx_perftest tag_lat, tag_bw and ucp_put_bw over rc_verbs and ud_verbs;
#   then perftest's and umlx perf's figures for the same tests, side by side.
#
# Environment: PROFILE (cargo profile, default release), CARGO_TARGET_DIR, or BUILD_DIR (a
# directory holding a libibverbs.so and a umlx built already, e.g. target/pgo/release: nothing
# is built); ITERS (pingpong exchanges, default 1000); SERVER_ENV and CLIENT_ENV (VAR=value
# words) give each side its own device, e.g. two functions of a real adapter bound to vfio-pci:
#   SERVER_ENV="UMLX_DEVICES=pci:0000:3b:00.0 UMLX_IP=192.0.2.1" \
#   CLIENT_ENV="UMLX_DEVICES=pci:0000:3b:00.1 UMLX_IP=192.0.2.2" \
#   SERVER_UMLX="-d pci:0000:3b:00.0 --ip 192.0.2.1" CLIENT_UMLX="-d pci:0000:3b:00.1 --ip 192.0.2.2" \
#   bash ibverbs/run-compat.sh
# (SERVER_UMLX and CLIENT_UMLX: the same devices as umlx tools' options, for the mixed pairs.)
# Without them both sides use the default device (the embedded sim on the automatic wire), and
# the -e cases a named UDP wire. The rdma-core libraries
# these packages pull in are installed but never loaded: every program is checked to resolve
# libibverbs.so.1, libmlx5.so.1 and libefa.so.1 to this library.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
profile=${PROFILE:-release}
target=${CARGO_TARGET_DIR:-$root/target}
iters=${ITERS:-1000}
passed=0
failed=0

ok() { echo "ok:   $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }

if ! command -v ibv_rc_pingpong >/dev/null || ! command -v ib_write_bw >/dev/null || ! command -v ucx_perftest >/dev/null; then
    echo "== installing ibverbs-utils, perftest and ucx-utils"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    pkgs="ibverbs-utils perftest ucx-utils"
    if ! { $sudo apt-get install -y $pkgs >/dev/null 2>&1 ||
        { $sudo apt-get update >/dev/null 2>&1 && $sudo apt-get install -y $pkgs >/dev/null 2>&1; }; }; then
        echo "cannot install $pkgs"
        exit 1
    fi
fi

if [ -n "${BUILD_DIR:-}" ]; then
    # Built already (tools/pgo-build.sh's target/pgo/release, say): its library and its umlx.
    echo "== libibverbs.so.1 and umlx of $BUILD_DIR"
    lib="$(cd "$BUILD_DIR" && pwd)/libibverbs.so"
    umlx="$(cd "$BUILD_DIR" && pwd)/umlx"
    if [ ! -f "$lib" ] || [ ! -x "$umlx" ]; then
        echo "$BUILD_DIR holds no libibverbs.so and umlx"
        exit 1
    fi
else
    echo "== building libibverbs.so.1 ($profile)"
    build_profile=(--profile "$profile")
    [ "$profile" = dev ] && profile_dir=debug || profile_dir=$profile
    if ! (cd "$root" && nice -n 10 cargo build -q -p umlx-ibverbs -p umlx-tools "${build_profile[@]}"); then
        echo "build failed"
        exit 1
    fi
    lib="$target/$profile_dir/libibverbs.so"
    umlx="$target/$profile_dir/umlx"
fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
ln -s "$lib" "$work/libibverbs.so.1"
# perftest and UCX also link rdma-core's provider libraries for their direct verbs; the same
# library answers for them (src/ffi/direct.rs), so rdma-core's are never loaded.
ln -s "$lib" "$work/libmlx5.so.1"
ln -s "$lib" "$work/libefa.so.1"
export LD_LIBRARY_PATH="$work"
export UMLX_DEBUG=1
server_env=${SERVER_ENV:-}
client_env=${CLIENT_ENV:-}
server_umlx=${SERVER_UMLX:-}
client_umlx=${CLIENT_UMLX:-}

# Every program must load our library, with every symbol version it needs, and none of
# rdma-core's (ldd lists the one file once, under the first of its names a program needs).
for p in ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_uc_pingpong ibv_xsrq_pingpong \
    ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat; do
    libs=$(ldd "$(command -v $p)" | grep -E 'lib(ibverbs|mlx5|efa)\.so')
    if echo "$libs" | grep -q "=> $work/lib" && ! echo "$libs" | grep -qv "=> $work/lib"; then
        ok "$p loads umlx's library ($(echo "$libs" | awk '{print $1}' | tr '\n' ' '))"
    else
        bad "$p does not load umlx's library alone: $libs"
    fi
done

# Runs "$@" with a timeout, output in $work/$name.out; the exit status in $work/$name.rc.
run() {
    local name=$1
    shift
    timeout 120 "$@" >"$work/$name.out" 2>&1
    echo $? >"$work/$name.rc"
}

# Checks that $work/$1.out has a line matching the extended regex $2.
has() {
    if grep -Eq -- "$2" "$work/$1.out"; then ok "$1: $3"; else bad "$1: no line matching /$2/ ($3)"; fi
}

exited0() {
    local rc
    rc=$(cat "$work/$1.rc")
    if [ "$rc" = 0 ]; then ok "$1 exited 0"; else bad "$1 exited $rc"; fi
}

show() {
    echo "---- $1"
    sed 's/^/    /' "$work/$1.out"
}

echo "== ibv_devices"
run devices env $server_env ibv_devices
show devices
exited0 devices
has devices '^[[:space:]]+(umlx_sim0|mlx5_[0-9a-f:.]+)[[:space:]]+[0-9a-f]{16}$' "lists the device with its node GUID"

echo "== ibv_devinfo -v"
run devinfo env $server_env ibv_devinfo -v
head -12 "$work/devinfo.out" | sed 's/^/    /'
echo "    ..."
grep -E 'state:|active_|link_layer|GID\[' "$work/devinfo.out" | sed 's/^/    /'
exited0 devinfo
has devinfo '^hca_id:[[:space:]](umlx_sim0|mlx5_[0-9a-f:.]+)$' "hca_id"
has devinfo 'vendor_id:[[:space:]]+0x02c9|vendor_id:[[:space:]]+0x15b3' "a Mellanox vendor id"
has devinfo 'state:[[:space:]]+PORT_ACTIVE \(4\)' "port 1 active"
has devinfo 'link_layer:[[:space:]]+Ethernet' "Ethernet link layer"
has devinfo 'active_width:[[:space:]]+[0-9]+X \([0-9]+\)' "an active width (PTYS)"
has devinfo 'active_speed:[[:space:]]+[0-9.]+ Gbps \([0-9]+\)' "an active speed (PTYS)"
has devinfo 'GID\[  1\]:[[:space:]]+::ffff:[0-9.]+, RoCE v2' "GID 1 is the RoCEv2 GID of the port's IPv4 address"

# Waits until TCP port $1 listens (IPv4 or IPv6), at most 20 s.
wait_listen() {
    local hex
    hex=$(printf ':%04X' "$1")
    for _ in $(seq 200); do
        if awk -v p="$hex\$" '$2 ~ p && $4 == "0A" { found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# pair NAME "SERVER COMMAND" "CLIENT COMMAND": a server and its client (the client gets the
# host argument), outputs in $work/NAME-server.out and $work/NAME-client.out.
pair() {
    local name=$1 server=$2 client=$3
    local port=$((20000 + RANDOM % 20000))
    run "$name-server" env $server_env $server -p $port &
    local spid=$!
    if ! wait_listen $port; then
        bad "$name: the server does not listen on TCP port $port"
        show "$name-server"
        kill $spid 2>/dev/null
        return 1
    fi
    run "$name-client" env $client_env timeout 120 $client -p $port localhost
    wait $spid
    exited0 "$name-server"
    exited0 "$name-client"
}

# pingpong PROGRAM NAME SIZE SERVER_ENV CLIENT_ENV ARGS...: server and client, checked (SIZE:
# the message size the program's result line counts).
pingpong() {
    local prog=$1 name=$2 size=$3
    # `pair` reads these (bash's dynamic scope).
    local server_env=$4 client_env=$5
    shift 5
    echo "== $prog $* ($name)"
    pair "$name" "$prog $*" "$prog $*" || return
    for side in server client; do
        local n="$name-$side"
        show "$n" | grep -v '^    .*address:' || true
        has "$n" '^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}[,:] GID ::ffff:[0-9]' "local address with a RoCEv2 GID"
        has "$n" '^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:[0-9]' "remote address"
        has "$n" "^$((size * iters * 2)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$" "throughput line"
        has "$n" "^$iters iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$" "latency line"
        if grep -q "invalid data" "$work/$n.out"; then bad "$n: -c found invalid data"; else ok "$n: -c data check clean"; fi
    done
}

p1=$((40000 + RANDOM % 10000))
p2=$((p1 + 1))
named_wire_server=${SERVER_ENV:-"UMLX_DEVICES=sim:udp:127.0.0.1:$p1,127.0.0.1:$p2 UMLX_SIM_INDEX=0"}
named_wire_client=${CLIENT_ENV:-"UMLX_DEVICES=sim:udp:127.0.0.1:$p2,127.0.0.1:$p1 UMLX_SIM_INDEX=1"}

# rdma-core's three ping-pongs that umlx supports, each polled on the default device (the
# automatic wire) and with completion events (-e) on a named UDP wire. UD's messages are 1024
# bytes (its default), RC's and SRQ's 4096; ibv_srq_pingpong runs 16 QPs on one SRQ.
pingpong ibv_rc_pingpong rc-polled 4096 "$server_env" "$client_env" -g 1 -c -n "$iters"
pingpong ibv_rc_pingpong rc-events 4096 "$named_wire_server" "$named_wire_client" -g 1 -c -e -n "$iters"
pingpong ibv_ud_pingpong ud-polled 1024 "$server_env" "$client_env" -g 1 -c -n "$iters"
pingpong ibv_ud_pingpong ud-events 1024 "$named_wire_server" "$named_wire_client" -g 1 -c -e -n "$iters"
pingpong ibv_srq_pingpong srq-polled 4096 "$server_env" "$client_env" -g 1 -c -n "$iters"
pingpong ibv_srq_pingpong srq-events 4096 "$named_wire_server" "$named_wire_client" -g 1 -c -e -n "$iters"

# Several programs at once on the automatic loopback LAN (each process its own sim, MAC and
# address, found with ARP): four ibv_rc_pingpong pairs and two umlx perf write-lat pairs run
# together, twelve processes (only on the default device: named devices are two).
at_once() {
    local base=$((20000 + RANDOM % 20000)) pids=() k side
    # The program of pair K: ibv_rc_pingpong for 0-3, umlx perf write-lat for 4-5.
    lan_prog() {
        if [ "$1" -lt 4 ]; then echo "ibv_rc_pingpong -g 1 -c -n 200"; else echo "$umlx perf write-lat -s 64 -n 200"; fi
    }
    for k in 0 1 2 3 4 5; do
        run "lan$k-server" $(lan_prog $k) -p $((base + k)) &
        pids+=($!)
        wait_listen $((base + k)) || bad "lan$k: the server does not listen on TCP port $((base + k))"
    done
    for k in 0 1 2 3 4 5; do
        run "lan$k-client" $(lan_prog $k) -p $((base + k)) localhost &
        pids+=($!)
    done
    wait "${pids[@]}"
    for k in 0 1 2 3 4 5; do
        for side in server client; do
            exited0 "lan$k-$side"
            if [ "$k" -lt 4 ]; then has "lan$k-$side" '^200 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$' "latency line"; fi
        done
        if [ "$k" -ge 4 ]; then has "lan$k-client" '^ 64 +200 ' "umlx perf's result row"; fi
    done
    grep -h 'local address' "$work"/lan[0-3]-*.out | sed 's/.*GID //' | sort | uniq -d >"$work/lan-dup"
    if [ -s "$work/lan-dup" ]; then bad "two processes share an address: $(cat "$work/lan-dup")"; else ok "the eight ping-pong processes have eight addresses"; fi
}
if [ -z "$server_env$client_env" ]; then
    echo "== twelve processes at once on the automatic loopback LAN"
    at_once
fi

# What umlx does not implement fails cleanly, with the program's own message for it: UC QPs
# (ibv_create_qp answers EOPNOTSUPP) and XRC domains (ibv_open_xrcd: EOPNOTSUPP).
echo "== unsupported: ibv_uc_pingpong, ibv_xsrq_pingpong"
run uc ibv_uc_pingpong -g 1
show uc
if [ "$(cat "$work/uc.rc")" = 1 ]; then ok "uc exited 1"; else bad "uc exited $(cat "$work/uc.rc"), not 1"; fi
has uc '^Couldn.t create QP$' "ibv_uc_pingpong's message for a QP it cannot create"
has uc 'ibv_create_qp: QP type 3 \(UC\) is not supported' "umlx's reason (UMLX_DEBUG)"
run xsrq ibv_xsrq_pingpong -g 1
show xsrq
if [ "$(cat "$work/xsrq.rc")" = 1 ]; then ok "xsrq exited 1"; else bad "xsrq exited $(cat "$work/xsrq.rc"), not 1"; fi
has xsrq "^Couldn.t Open the XRC Domain $(python3 -c 'import errno; print(errno.EOPNOTSUPP)')\$" "ibv_xsrq_pingpong's message with errno EOPNOTSUPP"


# perftest's result rows ("#bytes #iterations ..." then numbers), blanks squeezed to one space.
result_rows() {
    tr -s ' \t' ' ' <"$work/$1.out" | grep -E '^ [0-9]+ [0-9]+ [0-9.]+ [0-9.]+ [0-9.]+'
}
result_row() {
    result_rows "$1" | tail -1
}

# Checks that the output of run NAME has perftest's result row for SIZE bytes and ITERATIONS
# (default 1000) iterations.
has_result_row() {
    local row iterations=${3:-1000}
    row=$(result_row "$1")
    if echo "$row" | grep -Eq "^ $2 $iterations [0-9.]+ [0-9.]+ [0-9.]+"; then
        ok "$1: result row:$(echo "$row" | cut -c1-70)"
    else
        bad "$1: no result row for $2 bytes, $iterations iterations"
        show "$1"
    fi
}

# perftest: each of the eight RC tests, both sides perftest on umlx (GID index 1, the RoCEv2
# GID). The bandwidth tests check the result row of the default 64 KiB message, the latency
# tests that of 2 bytes (atomics: 8); WRITE and READ bandwidth also run over all sizes (-a,
# 2 B .. 8 MiB, 20 iterations each).
echo "== perftest on umlx (ibv_wr* API, -x 1)"
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
    case $t in
    ib_atomic_*) size=8 ;;
    *_bw) size=65536 ;;
    *) size=2 ;;
    esac
    # READ and atomic latency: the server is passive and prints no result.
    case $t in
    ib_read_lat | ib_atomic_lat) sides=client ;;
    *) sides="server client" ;;
    esac
    if pair "$t" "$t -x 1 -n 1000" "$t -x 1 -n 1000"; then
        for side in $sides; do
            has_result_row "$t-$side" "$size"
        done
        for side in server client; do
            if grep -Eqi 'failed|unable|couldn|error' "$work/$t-$side.out"; then
                bad "$t-$side: reports an error"
                show "$t-$side"
            fi
        done
    else
        show "$t-server"
        show "$t-client"
    fi
done
# Small messages, one WR per post (perftest's default): the rate of a burst of doorbells,
# whose frames share datagrams (`sim::port::tx_hold`).
for t in ib_write_bw ib_send_bw; do
    if pair "$t-64" "$t -x 1 -s 64 -n 100000" "$t -x 1 -s 64 -n 100000"; then
        has_result_row "$t-64-client" 64 100000
    else
        show "$t-64-server"
        show "$t-64-client"
    fi
done
for t in ib_write_bw ib_read_bw; do
    if pair "$t-all" "$t -x 1 -a -n 20" "$t -x 1 -a -n 20"; then
        n=$(result_rows "$t-all-client" | grep -cE '^ [0-9]+ 20 ')
        if [ "$n" = 23 ]; then ok "$t-all: 23 sizes, 2 B to 8 MiB"; else bad "$t-all: $n result rows, not 23"; show "$t-all-client"; fi
    else
        show "$t-all-server"; show "$t-all-client"
    fi
done

# Event mode (-e): perftest waits for a CQ event, then polls once, so an event for a
# completion that was already in the CQ when it was armed (a stale one) fails it.
for t in ib_send_lat ib_read_lat ib_send_bw; do
    case $t in
    *_bw) size=65536 ;;
    *) size=2 ;;
    esac
    if pair "$t-events" "$t -x 1 -e -n 1000" "$t -x 1 -e -n 1000"; then
        has_result_row "$t-events-client" "$size"
    else
        show "$t-events-server"
        show "$t-events-client"
    fi
done

# Mixed pairs: an unmodified rdma-core program on one side, a umlx tool (umlx-verbs, no
# libibverbs) on the other.
echo "== mixed pairs: rdma-core programs and umlx tools"
if pair mixed-rc "ibv_rc_pingpong -g 1 -c -n $iters" "$umlx rc-pingpong $client_umlx -g 1 -c -n $iters"; then
    has mixed-rc-server "^$iters iters in [0-9.]+ seconds" "ibv_rc_pingpong served umlx rc-pingpong"
    if grep -q "invalid data" "$work/mixed-rc-server.out"; then bad "mixed-rc: invalid data"; else ok "mixed-rc: -c data check clean"; fi
fi
if pair mixed-rc2 "$umlx rc-pingpong $server_umlx -g 1 -c -n $iters" "ibv_rc_pingpong -g 1 -c -n $iters"; then
    has mixed-rc2-client "^$iters iters in [0-9.]+ seconds" "umlx rc-pingpong served ibv_rc_pingpong"
fi
if pair mixed-write-bw "ib_write_bw -x 1 -n 1000" "$umlx perf ib_write_bw $client_umlx -x 1 -n 1000"; then
    if result_row mixed-write-bw-server | grep -Eq '^ 65536 1000 '; then ok "ib_write_bw served umlx perf ib_write_bw"; else bad "mixed-write-bw: no result row"; show mixed-write-bw-server; fi
fi
if pair mixed-send-lat "$umlx perf ib_send_lat $server_umlx -x 1 -n 1000" "ib_send_lat -x 1 -n 1000"; then
    if result_row mixed-send-lat-client | grep -Eq '^ 2 1000 '; then ok "umlx perf ib_send_lat served ib_send_lat"; else bad "mixed-send-lat: no result row"; show mixed-send-lat-client; fi
fi

# UCX over umlx. UCX lists an RDMA device only when /dev/infiniband/<dev_name> is a character
# device it may open, which a kernel-bypass device does not have: each UCX program runs in a
# mount namespace of its own (unshare -m, root) where a tmpfs on /dev/infiniband holds that
# name bound to /dev/null; nothing outside the namespace changes, but /dev/infiniband is
# created (empty) when missing, and removed again at the end.
ucx_device=${UCX_DEVICE:-umlx_sim0}
ucx_ns="$work/ucx-ns"
cat >"$ucx_ns" <<EOF
#!/bin/sh
# Runs "\$@" in a mount namespace where /dev/infiniband/$ucx_device is a character device.
exec unshare -m sh -c 'mount -t tmpfs tmpfs /dev/infiniband && touch /dev/infiniband/$ucx_device &&
    mount --bind /dev/null /dev/infiniband/$ucx_device && exec "\$@"' ucx-ns "\$@"
EOF
chmod +x "$ucx_ns"
echo "== UCX over umlx (ucx_info, ucx_perftest)"
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
    bad "UCX: needs root and unshare (a mount namespace with /dev/infiniband/$ucx_device)"
else
    made_dev_dir=""
    if [ ! -d /dev/infiniband ]; then mkdir /dev/infiniband && made_dev_dir=1; fi
    run ucx-info env $server_env "$ucx_ns" ucx_info -d
    exited0 ucx-info
    for tl in rc_verbs ud_verbs; do
        if awk -v d="$ucx_device:1" -v t="$tl" '/Transport:/ { tr = $3 } /Device:/ && $3 == d && tr == t { f = 1 } END { exit !f }' "$work/ucx-info.out"; then
            ok "ucx_info -d lists $tl on $ucx_device:1"
        else
            bad "ucx_info -d does not list $tl on $ucx_device:1"
            show ucx-info
        fi
    done
    # UCX_TLS=rc_verbs needs UCX's auxiliary transport for its wire-up (ud_verbs), as on any
    # adapter; the RC case checks that the data lane is rc_verbs.
    for tls in rc_verbs,ud_verbs ud_verbs; do
        for t in tag_lat tag_bw ucp_put_bw; do
            name="ucx-${tls%%,*}-$t"
            export UCX_TLS=$tls UCX_NET_DEVICES=$ucx_device:1 UCX_LOG_LEVEL=info
            if pair "$name" "$ucx_ns ucx_perftest" "$ucx_ns ucx_perftest -t $t -n 1000"; then
                row=$(grep -E '^Final:' "$work/$name-client.out" | tr -s ' ')
                if echo "$row" | grep -Eq '^Final: 1000 [0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+ [0-9]+ [0-9]+$'; then
                    ok "$name:$(echo "$row" | cut -c7-80)"
                else
                    bad "$name: no Final line"
                    show "$name-client"
                fi
                lane=${tls%%,*}
                if grep -Eq "ep_cfg\[[0-9]+\]: [a-z_]+\($lane/$ucx_device:1\)" "$work/$name-client.out"; then
                    ok "$name: the data lane is $lane"
                else
                    bad "$name: the data lane is not $lane"
                    grep ep_cfg "$work/$name-client.out" | sed 's/^/    /'
                fi
            else
                show "$name-server"
                show "$name-client"
            fi
            unset UCX_TLS UCX_NET_DEVICES UCX_LOG_LEVEL
        done
    done
    [ -n "$made_dev_dir" ] && rmdir /dev/infiniband 2>/dev/null
fi

# The figures: perftest's own results beside umlx perf's for the same tests, in this run. The
# latency tests run anew with $cmp_lat_iters iterations, each tool: a run that the scheduler
# starts with both processes on one CPU spends its first milliseconds there, which can be most
# of a thousand iterations.
cmp_lat_iters=20000
echo "== perftest and umlx perf, same tests, this run (software ConnectX, two processes)"
for t in ib_write_bw ib_send_lat ib_write_lat; do
    case $t in
    *_lat)
        n=$cmp_lat_iters
        ref="cmp-$t"
        pair "$ref" "$t -x 1 -n $n" "$t -x 1 -n $n" >/dev/null
        ;;
    *) n=1000 ref=$t ;;
    esac
    pair "umlx-$t" "$umlx perf $t $server_umlx -x 1 -n $n" "$umlx perf $t $client_umlx -x 1 -n $n" >/dev/null
    printf '    %-14s perftest: %s\n    %-14s umlx perf:%s\n' "$t" "$(result_row "$ref-client" | cut -c1-90)" "" "$(result_row "umlx-$t-client" | cut -c1-90)"
done
for f in "$work"/ucx-*-client.out; do
    [ -f "$f" ] || continue
    n=$(basename "$f" -client.out)
    printf '    %-24s %s\n' "$n" "$(grep -E '^Final:' "$f" | tr -s ' ')"
done

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
