# Shell functions the VM scripts share (sourced, not run).

# copy_modules DEST KERNEL_DIR KVER MODULE...: copies each module and its dependencies (in
# load order, decompressed) from the kernel tree into DEST/lib/modules and lists them in
# DEST/modules.order for the guest's init.
copy_modules() {
  local R=$1 K=$2 V=$3
  shift 3
  : > "$R/modules.order"
  for m in "$@"; do
    kmod modprobe -d "$K" -S "$V" --show-depends "$m" | awk '$1=="insmod"{print $2}'
  done | awk '!seen[$0]++' | while read -r ko; do
    local name
    name=$(basename "$ko")
    case "$name" in
      *.ko.xz) xz -dc "$ko" > "$R/lib/modules/${name%.xz}"; name=${name%.xz};;
      *.ko.zst) zstd -qdc "$ko" > "$R/lib/modules/${name%.zst}"; name=${name%.zst};;
      *) cp "$ko" "$R/lib/modules/$name";;
    esac
    echo "/lib/modules/$name" >> "$R/modules.order"
  done
}

# build_umlx SUITE: builds the release binaries of the repository at $ROOT, umlx and the VFIO
# suite's umlx-vfio-selftest (log in $LOGS/cargo-build.log), and sets BIN and SELFTEST_BIN to
# them; on failure says "SUITE: FAILED" and exits.
build_umlx() {
  local suite=$1 target_dir
  echo "== cargo build --release -p umlx-tools --bins (log: $LOGS/cargo-build.log)"
  if ! (cd "$ROOT" && cargo build --release -p umlx-tools --bins) > "$LOGS/cargo-build.log" 2>&1; then
    tail -30 "$LOGS/cargo-build.log"
    echo "$suite: FAILED (cargo build; log $LOGS/cargo-build.log)"
    exit 1
  fi
  target_dir=${CARGO_TARGET_DIR:-$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}
  BIN=$target_dir/release/umlx
  SELFTEST_BIN=$target_dir/release/umlx-vfio-selftest
  for b in "$BIN" "$SELFTEST_BIN"; do
    [ -x "$b" ] || { echo "$suite: FAILED (no binary at $b)"; exit 1; }
  done
}
