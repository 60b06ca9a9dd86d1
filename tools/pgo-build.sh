#!/usr/bin/env bash
# Builds target/pgo/release/umlx and target/pgo/release/libibverbs.so: the umlx tool and the
# libibverbs.so.1 drop-in compiled with profile-guided optimisation (PGO).
#
# Same sources, same release profile (one codegen unit, fat LTO); the compiler is also given a
# profile of where the program spends its time, taken from an instrumented build of it running
# `umlx demo --quick`, `umlx bench sim --quick` and 400,000 round trips each of `umlx perf
# send-lat` and `write-lat` between two processes. With it, LLVM inlines along the paths that
# run hot (a frame's receive, a doorbell's WQE to the wire), lays their blocks out in one line
# of code and moves the rest aside. The software ConnectX runs about a fifth fewer instructions
# per message (callgrind) and its two-process latencies drop by about 8%: see the README's
# "The software ConnectX's speed". The library is built with the same profile: the crates it
# shares with umlx (the sim, the driver, verbs) are where an unmodified program's time goes,
# and perftest's ib_send_lat through it took 0.90 times as long as through the plain library.
#
# Its panics abort (CARGO_PROFILE_RELEASE_PANIC=abort, both builds): the program carries no
# unwinding paths, is 13% smaller, and runs about 2% fewer instructions per message. umlx has
# no panic on purpose; the plain build keeps unwinding (its tests need it). So does the plain
# library, whose C entry points turn a panic into an error return; this one's would abort the
# program, as a C library's failed assertion does.
#
# Takes about two minutes on two cores: two builds and about 20 seconds of training. Needs the
# toolchain's llvm-profdata (the rustup component llvm-tools, added here if missing).
# Usage: bash tools/pgo-build.sh   (then: target/pgo/release/umlx bench sim)
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/target/pgo"
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    echo "== llvm-profdata is missing: rustup component add llvm-tools"
    if ! rustup component add llvm-tools || [ ! -x "$profdata" ]; then
        echo "tools/pgo-build.sh: no llvm-profdata at $profdata (the rustup component llvm-tools);" \
            "the plain build (cargo build --release) needs none" >&2
        exit 1
    fi
fi
export CARGO_PROFILE_RELEASE_PANIC=abort
rm -rf "$out/profiles" "$out"/umlx-*.profdata
mkdir -p "$out/profiles"

echo "== 1/3: the instrumented build (target/pgo/generate)"
# umlx and libibverbs.so.1 are built together, in both builds: with their dependencies'
# features unified, the crates they share are the same crates (the same symbol names), and
# the library's copies of them find their counts in the profile umlx's runs write.
targets=(-p umlx-tools -p umlx-ibverbs --bin umlx --lib)
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$out/profiles" \
    cargo build --release "${targets[@]}" --target-dir "$out/generate"

echo "== 2/3: training: umlx demo --quick, umlx bench sim --quick (output in target/pgo/training.log)"
# The bench's second processes are this program too: each writes its own profile.
export LLVM_PROFILE_FILE="$out/profiles/umlx-%p-%m.profraw"
"$out/generate/release/umlx" demo --quick > "$out/training.log" 2>&1
"$out/generate/release/umlx" bench sim --quick >> "$out/training.log" 2>&1
# The bench's latency runs were 1,000 round trips when this was measured, next to millions of
# messages in one process: alone they left a UDP wire's receive and send too cold for the
# optimiser to favour. A longer run of each latency test weighs them in, on the automatic wire
# (the loopback LAN), as the bench and a user run them. (The bench now runs 100,000 round
# trips of each; the training was not measured again without these runs.)
for test in send-lat write-lat; do
    port=$((20000 + RANDOM % 20000))
    "$out/generate/release/umlx" perf "$test" -s 64 -n 400000 --no-progress -d sim -p "$port" \
        >> "$out/training.log" 2>&1 &
    server=$!
    # The client retries a refused connection while the server starts.
    "$out/generate/release/umlx" perf "$test" -s 64 -n 400000 --no-progress -d sim -p "$port" 127.0.0.1 \
        >> "$out/training.log" 2>&1
    wait "$server"
done
unset LLVM_PROFILE_FILE
"$profdata" merge -o "$out/umlx.profdata" "$out/profiles"
# Cargo does not know a crate depends on the profile's bytes: named by its hash, a new profile
# changes the compiler's flags, and every crate is built again with it.
profile="$out/umlx-$(sha256sum "$out/umlx.profdata" | cut -c1-16).profdata"
mv "$out/umlx.profdata" "$profile"

echo "== 3/3: the optimised builds (target/pgo/release/umlx, target/pgo/release/libibverbs.so)"
UMLX_BUILD=pgo RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$profile" \
    cargo build --release "${targets[@]}" --target-dir "$out"
echo "built $out/release/umlx and $out/release/libibverbs.so"
