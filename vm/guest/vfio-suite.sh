#!/bin/sh
# The guest side of run-vfio-suite.sh: finds QEMU's edu and e1000e devices and runs
# `umlx-vfio-selftest --rebind` on each. The VM (see run-vfio-suite.sh) has
#   - an edu alone behind PCIe root port 1 (own IOMMU group; secondary bus reset possible),
#   - an e1000e alone behind PCIe root port 2 (MSI-X; bus reset),
#   - an edu at 00:05.0 sharing a multifunction slot (and so an IOMMU group) with an e1000 at
#     00:05.1, which the e1000 driver holds: the non-viable group.
# Exit status: the number of selftest runs that failed.
export PATH=/sbin:/usr/sbin:/bin:/usr/bin
# Kernel messages only in the log buffer, not on the console: the console carries the
# selftest's PASS/FAIL lines unbroken (the selftest reads DMAR faults with dmesg).
dmesg -n 1
# A few 2 MiB pages, so the selftest's large DMA buffer exercises the huge-page path.
echo 8 > /proc/sys/vm/nr_hugepages
echo "huge pages: $(cat /proc/sys/vm/nr_hugepages) x 2 MiB"
echo "--- PCI devices (address vendor:device driver iommu_group)"
EDU_RP= EDU_MF= E1000E=
for d in /sys/bus/pci/devices/*; do
  b=$(basename "$d"); id="$(cat "$d/vendor"):$(cat "$d/device")"
  drv=$(basename "$(readlink "$d/driver" 2>/dev/null)" 2>/dev/null)
  grp=$(basename "$(readlink "$d/iommu_group" 2>/dev/null)" 2>/dev/null)
  echo "    $b $id ${drv:--} ${grp:--} reset_method=$(cat "$d/reset_method" 2>/dev/null)"
  case "$id" in
    0x1234:0x11e8) case "$b" in 0000:00:*) EDU_MF=$b;; *) EDU_RP=$b;; esac;;
    0x8086:0x10d3) E1000E=$b;;
  esac
done
fails=0; runs=0
run() {
  runs=$((runs + 1))
  echo "=== umlx-vfio-selftest $*"
  /umlx-vfio-selftest "$@" || fails=$((fails + 1))
}
for need in EDU_RP E1000E EDU_MF; do
  eval "v=\$$need"; [ -n "$v" ] || { echo "FAIL topology: no device for $need"; fails=$((fails + 1)); }
done
[ -n "$EDU_RP" ] && run "$EDU_RP" --device edu --rebind
if [ -n "$E1000E" ]; then
  # QEMU's e1000e has a PM capability, so the kernel tries a D3hot->D0 "PM reset" before the
  # secondary bus reset; QEMU does not reset the model's registers on that transition. Use the
  # bus reset, which QEMU does model, so the selftest can see registers return to defaults.
  echo bus > "/sys/bus/pci/devices/$E1000E/reset_method" && echo "reset_method of $E1000E: bus"
  run "$E1000E" --device e1000e --rebind
fi
# The guest kernel rate-limits DMAR fault messages (10 per 5 s): let the window pass so the
# second edu run's faults are logged too.
sleep 5
[ -n "$EDU_MF" ] && run "$EDU_MF" --device edu --rebind
if [ -n "$EDU_RP" ]; then
  # Unprivileged: the group node given to uid 1000, a 16 MiB memlock limit, no capabilities.
  # The selftest then also checks that pinning beyond the limit fails with the driver's error.
  G=$(basename "$(readlink "/sys/bus/pci/devices/$EDU_RP/iommu_group")")
  echo 'tester:x:1000:1000:tester:/tmp:/bin/sh' >> /etc/passwd
  echo 'tester:x:1000:' >> /etc/group
  chown 1000:1000 "/dev/vfio/$G"
  echo "=== (uid 1000, ulimit -l 16384) umlx-vfio-selftest $EDU_RP --device edu"
  runs=$((runs + 1))
  (ulimit -l 16384 && exec su tester -c "/umlx-vfio-selftest $EDU_RP --device edu") || fails=$((fails + 1))
fi
echo "--- guest kernel log (DMAR, vfio)"
dmesg | grep -E "DMAR: \[|DMAR-IR|vfio|iommu" | tail -20
echo "SUITE-GUEST runs=$runs failed=$fails"
exit $fails
