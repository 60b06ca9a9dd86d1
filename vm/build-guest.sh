#!/usr/bin/env bash
# Builds the base guest for the VFIO suite: a Debian kernel and a busybox initramfs holding the
# kernel modules the suite needs (vfio-pci, vfio_iommu_type1, e1000, e1000e and their
# dependencies, in load order). The umlx binary and the test script are added per run by
# run-vfio-suite.sh as a second, concatenated cpio archive.
#
# Installs what it needs with apt-get (qemu-system-x86, busybox-static, cpio) when missing.
# Everything downloaded or built lives in $UMLX_VM_DIR (default /tmp/umlx-vm), never in the
# repository. Idempotent: the downloads are kept, the initramfs is rebuilt (a second or two).
#
# Output: $UMLX_VM_DIR/vmlinuz, $UMLX_VM_DIR/initramfs-base.cpio.gz
set -euo pipefail
W=${UMLX_VM_DIR:-/tmp/umlx-vm}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vm/common.sh
. "$HERE/common.sh"
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$W/debs"

# 1. Host tools.
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "build-guest: missing ${need[*]}; run as root (apt-get install) or install them" >&2
    exit 1
  fi
  echo "build-guest: installing ${need[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# 2. The kernel: the image package behind linux-image-amd64, extracted, not installed.
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
if [ -z "$KPKG" ]; then
  # No package lists yet (a fresh machine): fetch them once.
  [ "$(id -u)" = 0 ] && apt-get update -q
  KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
fi
if [ -z "$KPKG" ]; then
  echo "build-guest: apt-cache knows no linux-image-amd64: run apt-get update as root (the Debian archive is needed once)" >&2
  exit 1
fi
KVER=${KPKG#linux-image-}
if ! [ -d "$W/kernel/lib/modules/$KVER" ]; then
  echo "build-guest: downloading $KPKG"
  (cd "$W/debs" && apt-get download -q "$KPKG")
  rm -rf "$W/kernel"
  dpkg -x "$W"/debs/"$KPKG"_*.deb "$W/kernel"
fi
cp "$W/kernel/boot/vmlinuz-$KVER" "$W/vmlinuz"

# 3. kmod, to resolve module dependencies on the host (extracted, not installed).
if ! [ -f "$W/kmod/.done" ]; then
  echo "build-guest: downloading kmod"
  (cd "$W/debs" && apt-get download -q kmod libkmod2 liblzma5 libssl3 libzstd1)
  rm -rf "$W/kmod"; mkdir -p "$W/kmod"
  for p in kmod libkmod2 liblzma5 libssl3 libzstd1; do dpkg -x "$W"/debs/"$p"_*.deb "$W/kmod"; done
  touch "$W/kmod/.done"
fi
# kmod acts by the name it is called by: depmod and modprobe are symlinks to it.
ln -sf kmod "$W/kmod/bin/depmod"; ln -sf kmod "$W/kmod/bin/modprobe"
kmod() { # kmod depmod|modprobe ARGS...
  local tool=$1; shift
  LD_LIBRARY_PATH="$W/kmod/usr/lib/x86_64-linux-gnu:$W/kmod/lib/x86_64-linux-gnu" "$W/kmod/bin/$tool" "$@"
}
kmod depmod -b "$W/kernel" "$KVER"

# 4. The initramfs tree: busybox, the modules (in load order, listed in /modules.order), /init.
R=$W/initramfs
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,root,lib/modules}
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"; done
copy_modules "$R" "$W/kernel" "$KVER" vfio_iommu_type1 vfio-pci e1000 e1000e
echo 'root:x:0:0:root:/root:/bin/sh' > "$R/etc/passwd"
echo 'root:x:0:' > "$R/etc/group"
install -m 755 "$HERE/guest/init.sh" "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1 > "$W/initramfs-base.cpio.gz")
echo "build-guest: kernel $KVER, modules: $(xargs -n1 basename < "$R/modules.order" | tr '\n' ' ')"
echo "build-guest: $W/vmlinuz, $W/initramfs-base.cpio.gz ($(du -h "$W/initramfs-base.cpio.gz" | cut -f1))"
