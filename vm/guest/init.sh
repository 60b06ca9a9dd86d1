#!/bin/sh
# /init of the test guest (busybox initramfs): mounts the basics, loads the modules listed in
# /modules.order, runs /test.sh (added by run-vfio-suite.sh as a second cpio archive), prints
# its exit status and powers the VM off.
export PATH=/sbin:/usr/sbin:/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo "GUEST-INIT-START uptime=$(cut -d' ' -f1 /proc/uptime)s kernel $(uname -r)"
for ko in $(cat /modules.order); do
  insmod "$ko" || echo "GUEST-WARN: insmod $ko failed"
done
rc=0
if [ -x /test.sh ]; then
  /test.sh; rc=$?
else
  echo "no /test.sh"; rc=1
fi
echo "GUEST-TEST-END rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)s"
sync
poweroff -f
