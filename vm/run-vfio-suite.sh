#!/usr/bin/env bash
# The VFIO suite: umlx's VFIO backend against Linux vfio-pci and an IOMMU, in a VM.
#
#   bash vm/run-vfio-suite.sh          # a few minutes; exit status 0 only if every check passed
#
# Steps: build-guest.sh (installs qemu-system-x86, busybox-static and cpio with apt-get when
# missing, downloads a Debian kernel, builds a busybox initramfs with the VFIO and NIC modules);
# `cargo build --release` of the umlx binary, which goes into the guest with the shared
# libraries it links; then one QEMU boot under TCG (no KVM needed) of a q35 machine with an
# emulated Intel IOMMU (intel_iommu=on in the guest, translated mode) and:
#   - edu   behind PCIe root port 1 (own IOMMU group, bus reset),
#   - e1000e behind PCIe root port 2 (MSI-X, bus reset),
#   - edu + e1000 sharing the multifunction slot 00:05 (one IOMMU group; e1000 keeps its driver).
# The guest (guest/vfio-suite.sh) runs `umlx-vfio-selftest --rebind` on each device, then once
# more on the first edu as an unprivileged user with a memlock limit; every
# check prints one PASS/FAIL/SKIP line. This script then requires: the guest finished, no FAIL
# line, and the key checks (below) passed at least once.
#
# Works with no standard input. Needs root only to install missing packages with apt-get.
# Env: UMLX_VM_DIR (downloads and images, default /tmp/umlx-vm), UMLX_VM_LOGS (default
# $UMLX_VM_DIR/logs/<time>), UMLX_VM_TIMEOUT (seconds for the VM, default 900),
# UMLX_VM_MEM (default 1G), UMLX_VM_TEST (another guest script, for debugging).
set -euo pipefail
exec </dev/null
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=vm/common.sh
. "$ROOT/vm/common.sh"
W=${UMLX_VM_DIR:-/tmp/umlx-vm}
LOGS=${UMLX_VM_LOGS:-$W/logs/$(date +%Y%m%d-%H%M%S)}
TIMEOUT=${UMLX_VM_TIMEOUT:-900}
MEM=${UMLX_VM_MEM:-1G}
mkdir -p "$LOGS"
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }
echo "== VFIO suite: logs in $LOGS"

# 1. The guest's kernel and base initramfs.
echo "== building the guest (log: $LOGS/build-guest.log)"
if ! bash "$ROOT/vm/build-guest.sh" > "$LOGS/build-guest.log" 2>&1; then
  tail -20 "$LOGS/build-guest.log"
  echo "VFIO suite: FAILED (building the guest; log $LOGS/build-guest.log)"
  exit 1
fi
tail -2 "$LOGS/build-guest.log"
echo "   (guest ready at $(elapsed))"

# 2. The binaries (the suite ships umlx-vfio-selftest).
build_umlx "VFIO suite"
echo "   ($SELFTEST_BIN ready at $(elapsed))"

# 3. The per-run archive: umlx-vfio-selftest (debug info stripped), its shared libraries,
# /test.sh.
OV=$W/overlay
rm -rf "$OV"; mkdir -p "$OV"
if command -v strip >/dev/null; then
  strip -o "$OV/umlx-vfio-selftest" "$SELFTEST_BIN"
else
  cp "$SELFTEST_BIN" "$OV/umlx-vfio-selftest"
fi
ldd "$SELFTEST_BIN" | awk '/=>/ && $3 ~ /^\// {print $3} /^[ \t]*\/lib64\// {print $1}' | sort -u | while read -r lib; do
  mkdir -p "$OV$(dirname "$lib")"; cp -L "$lib" "$OV$lib"
done
install -m 755 "${UMLX_VM_TEST:-$ROOT/vm/guest/vfio-suite.sh}" "$OV/test.sh"
# Linux unpacks concatenated cpio archives in order: the base, then this one.
{ cat "$W/initramfs-base.cpio.gz"; (cd "$OV" && find . | cpio -o -H newc --quiet | gzip -1); } > "$W/initrd.cpio.gz"
echo "== guest archive: umlx-vfio-selftest $(du -h "$OV/umlx-vfio-selftest" | cut -f1) + $(find "$OV" -name '*.so*' | wc -l) libraries"

# 4. One boot. Serial console to a file; QEMU never reads standard input.
echo "== booting (TCG, q35, intel-iommu; console: $LOGS/console.log)"
QEMU=(qemu-system-x86_64 -accel tcg,thread=multi -machine q35 -cpu max -smp 1 -m "$MEM"
  -nodefaults -display none -monitor none -no-reboot -serial "file:$LOGS/console.log"
  -device intel-iommu,intremap=on,caching-mode=on
  -device pcie-root-port,id=rp1,chassis=1,bus=pcie.0,addr=0x3,x-speed=5
  -device pcie-root-port,id=rp2,chassis=2,bus=pcie.0,addr=0x4,x-speed=5
  -device edu,bus=rp1
  -device e1000e,bus=rp2,romfile=
  -device edu,bus=pcie.0,addr=0x5.0,multifunction=on
  -device e1000,bus=pcie.0,addr=0x5.1,romfile=
  -kernel "$W/vmlinuz" -initrd "$W/initrd.cpio.gz"
  -append "console=ttyS0 panic=-1 quiet loglevel=4 intel_iommu=on")
# x-speed=5 on the root ports: for a port faster than 5 GT/s the guest kernel waits, after a
# secondary bus reset, for Data Link Layer Link Active, which QEMU 7.2 does not set again: the
# reset then fails (ENOTTY after seconds) and vfio-pci offers no VFIO_DEVICE_RESET for e1000e.
printf '%q ' "${QEMU[@]}" > "$LOGS/qemu-cmdline.txt"
: > "$LOGS/console.log"
tboot=$(date +%s)
timeout -k 10 "$TIMEOUT" "${QEMU[@]}" > "$LOGS/qemu.log" 2>&1 &
qpid=$!
tail -n +1 -f --pid=$qpid "$LOGS/console.log" | tr -d '\r' &
tpid=$!
qrc=0
wait $qpid || qrc=$?
wait $tpid || true
echo "== VM ran $(($(date +%s) - tboot)) s, qemu exit status $qrc (QEMU's own messages: $LOGS/qemu.log)"

# 5. Verdict.
C=$LOGS/console.clean.log
tr -d '\r' < "$LOGS/console.log" > "$C"
grep -E '^(PASS|FAIL|SKIP) ' "$C" > "$LOGS/results.txt" || true
problems=()
[ "$qrc" = 0 ] || problems+=("qemu exited with status $qrc$([ "$qrc" = 124 ] && echo " (timeout after $TIMEOUT s)")")
grep -q '^GUEST-TEST-END rc=0 ' "$C" || problems+=("the guest did not finish with rc=0: $(grep -o 'GUEST-TEST-END rc=[0-9]*' "$C" || echo 'no GUEST-TEST-END line')")
nfail=$(grep -c '^FAIL ' "$C" || true)
[ "$nfail" = 0 ] || problems+=("$nfail FAIL line(s)")
runs=$(grep -c '^vfio-selftest .*: [0-9]* passed, 0 failed' "$C" || true)
[ "$runs" = 4 ] || problems+=("$runs of 4 selftest runs passed")
# The checks that must have passed at least once (edu, e1000e, the shared group).
REQUIRED="mlx5-only-open other-driver-error not-bound-error non-viable-error non-viable-kernel viable-unbound-peer
 viable-after-bind group-sibling-busy
 open busy-error iommu-info config-ids config-bounds bus-master
 edu-id edu-liveness edu-factorial bar0-big-endian dma-map dma-to-device dma-from-device dma-roundtrip-data dma-large-buffer
 msi-too-many msi-enable msi-raise msi-raise-again msi-dma-completion irq-disable
 dma-second-buffer dma-unmap iommu-blocks-write iommu-blocks-read dmar-fault-logged dma-released
 e1000e-status e1000e-register-rw msix-enable msix-too-many e1000e-dma-tx msix-tx-completion
 msix-vector-0 msix-vector-1 msix-vector-2 msix-disable msi-ics enable-interrupts
 memlock-limit reset close group-released reopen"
for name in $REQUIRED; do
  grep -q "^PASS $name: " "$C" || problems+=("check $name never passed")
done
nreset=$(grep -c '^PASS reset: VFIO_DEVICE_RESET' "$C" || true)
[ "$nreset" -ge 2 ] || problems+=("a real VFIO_DEVICE_RESET passed $nreset time(s), expected 2 (edu and e1000e behind root ports)")

npass=$(grep -c '^PASS ' "$C" || true)
nskip=$(grep -c '^SKIP ' "$C" || true)
echo "== results ($LOGS/results.txt): $npass passed, $nfail failed, $nskip skipped"
if [ ${#problems[@]} -eq 0 ]; then
  echo "VFIO suite: PASSED in $(elapsed) (logs: $LOGS)"
  exit 0
fi
printf '  - %s\n' "${problems[@]}"
echo "VFIO suite: FAILED in $(elapsed) (logs: $LOGS)"
exit 1
