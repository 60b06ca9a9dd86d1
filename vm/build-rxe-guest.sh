#!/usr/bin/env bash
# Builds the base guest for the rxe suite: the VFIO suite's Debian kernel (vm/build-guest.sh
# fetches it) and a busybox initramfs with soft-RoCE (rdma_rxe, ib_uverbs, virtio-net and their
# dependencies, in load order) and rdma-core's user space: ibv_rc_pingpong, ibv_ud_pingpong,
# ibv_devinfo, perftest (ib_write_bw, ib_read_bw, ib_send_lat, ...), `rdma` (iproute2), with the
# rxe provider and every shared library they link. The packages are downloaded with
# `apt-get download` and extracted, never installed.
#
# Everything lives in $UMLX_VM_DIR (default /tmp/umlx-vm). Idempotent: downloads are kept.
# Output: $UMLX_VM_DIR/vmlinuz, $UMLX_VM_DIR/initramfs-rxe.cpio.gz
set -euo pipefail
W=${UMLX_VM_DIR:-/tmp/umlx-vm}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vm/common.sh
. "$HERE/common.sh"
export DEBIAN_FRONTEND=noninteractive

# 1. Host tools, the kernel and kmod: shared with the VFIO suite.
bash "$HERE/build-guest.sh"
KVER=$(ls "$W/kernel/lib/modules" | head -1)
kmod() { # kmod depmod|modprobe ARGS...
  local tool=$1; shift
  LD_LIBRARY_PATH="$W/kmod/usr/lib/x86_64-linux-gnu:$W/kmod/lib/x86_64-linux-gnu" "$W/kmod/bin/$tool" "$@"
}

# 2. rdma-core user space (extracted, not installed).
PKGS="rdma-core ibverbs-providers ibverbs-utils perftest libibverbs1 librdmacm1 libibumad3
 iproute2 libmnl0 libnl-3-200 libnl-route-3-200 libelf1 libbpf1 libcap2 libbsd0 libmd0
 libtirpc3 libdb5.3 libxtables12 libselinux1 libpcre2-8-0 zlib1g libzstd1 libgssapi-krb5-2
 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 libcap-ng0 libatm1 libpci3"
S=$W/rxe-stage
if ! [ -f "$S/.done" ]; then
  echo "build-rxe-guest: downloading rdma-core, perftest, iproute2 and their libraries"
  mkdir -p "$W/debs/rxe"
  (cd "$W/debs/rxe" && apt-get download -q $PKGS)
  rm -rf "$S"; mkdir -p "$S"
  for d in "$W"/debs/rxe/*.deb; do dpkg -x "$d" "$S"; done
  touch "$S/.done"
fi

# 3. The initramfs tree: busybox, the tools, their libraries, the modules, /init.
R=$W/initramfs-rxe
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib64,proc,sys,dev,tmp,run,etc,root,lib/modules,lib/x86_64-linux-gnu,usr/lib/x86_64-linux-gnu}
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"; done
for b in usr/bin/ibv_devinfo usr/bin/ibv_devices usr/bin/ibv_rc_pingpong usr/bin/ibv_ud_pingpong \
  usr/bin/ib_write_bw usr/bin/ib_read_bw usr/bin/ib_send_bw usr/bin/ib_send_lat usr/bin/ib_write_lat \
  usr/bin/ib_read_lat usr/bin/rdma bin/ip; do
  rm -f "$R/$b"; cp -L "$S/$b" "$R/$b"
done
cp -rL "$S/usr/lib/x86_64-linux-gnu/libibverbs" "$R/usr/lib/x86_64-linux-gnu/"
cp -a "$S/etc/libibverbs.d" "$R/etc/"
copy_lib() { # $1 = a library's path on the host or in the stage
  local p=$1 dst
  case "$p" in "$S/"*) dst=${p#"$S"};; *) dst=$p;; esac
  dst=${dst/#\/usr\/lib\/x86_64-linux-gnu/\/lib\/x86_64-linux-gnu}
  [ -e "$R$dst" ] && return
  mkdir -p "$R$(dirname "$dst")"; cp -L "$p" "$R$dst"
}
export LD_LIBRARY_PATH=$S/usr/lib/x86_64-linux-gnu:$S/lib/x86_64-linux-gnu
for f in $(find "$R/bin" "$R/usr" -type f); do
  [ "$(head -c4 "$f" | tail -c3)" = "ELF" ] || continue
  ldd "$f" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}' | while read -r p; do copy_lib "$p"; done || true
done
unset LD_LIBRARY_PATH
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 "$R/lib/x86_64-linux-gnu/"
echo "/lib/x86_64-linux-gnu" > "$R/etc/ld.so.conf"
ldconfig -r "$R" 2>/dev/null || true
echo 'root:x:0:0:root:/root:/bin/sh' > "$R/etc/passwd"
echo 'root:x:0:' > "$R/etc/group"
printf '127.0.0.1 localhost\n' > "$R/etc/hosts"
cp /etc/protocols /etc/services "$R/etc/" 2>/dev/null || true
copy_modules "$R" "$W/kernel" "$KVER" virtio_pci virtio_net crc32_generic rdma_rxe ib_uverbs
install -m 755 "$HERE/guest/init.sh" "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1 > "$W/initramfs-rxe.cpio.gz")
echo "build-rxe-guest: kernel $KVER, modules: $(xargs -n1 basename < "$R/modules.order" | tr '\n' ' ')"
echo "build-rxe-guest: $W/vmlinuz, $W/initramfs-rxe.cpio.gz ($(du -h "$W/initramfs-rxe.cpio.gz" | cut -f1))"
