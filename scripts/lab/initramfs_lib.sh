# Building the initramfs of a QEMU guest that boots this machine's root (9p, read-only) under a
# writable overlay in RAM: sourced by scripts/lab/ssh-guests.sh and udev/test-hotplug-in-guest.sh
# (both run here, on the machine that starts QEMU). The caller sets
#   initrd_dir  the folder the initramfs is built in
#   moddir      the guest kernel's lib/modules/<version> (with modules.dep)
#   busybox     a static busybox
# shellcheck disable=SC2154  # those three, set by the caller

declare -gA initramfs_seen=()

# The initramfs's folders, busybox, and an empty modules.list.
initramfs_start() {
  mkdir -p "$initrd_dir"/{bin,dev,proc,sys,lower,upper,newroot,lib/modules}
  cp "$busybox" "$initrd_dir/bin/busybox"
  : > "$initrd_dir/modules.list"
  initramfs_seen=()
}

# Copy module NAME, its dependencies first, into the initramfs (decompressed) and list it in
# modules.list in the order init loads them. A module built into the kernel is not in
# modules.dep: nothing to do.
initramfs_add_module() { # name
  local path deps dep
  path=$(awk -F: -v m="$1" '{ n = $1; sub(/.*\//, "", n); sub(/\.ko(\.[a-z]+)?$/, "", n); gsub(/-/, "_", n) } n == m { print $1; exit }' "$moddir/modules.dep")
  [ -n "$path" ] || return 0
  [ -z "${initramfs_seen[$path]:-}" ] || return 0
  initramfs_seen[$path]=1
  deps=$(awk -F: -v p="$path" '$1 == p { print $2 }' "$moddir/modules.dep")
  for dep in $deps; do dep="${dep##*/}"; dep="${dep%%.ko*}"; initramfs_add_module "${dep//-/_}"; done
  mkdir -p "$initrd_dir/lib/modules/$(dirname "$path")"
  case "$path" in
    *.ko.xz) xz -dc "$moddir/$path" > "$initrd_dir/lib/modules/${path%.xz}"; path="${path%.xz}" ;;
    *.ko.zst) zstd -qdc "$moddir/$path" > "$initrd_dir/lib/modules/${path%.zst}"; path="${path%.zst}" ;;
    *) cp "$moddir/$path" "$initrd_dir/lib/modules/$path" ;;
  esac
  echo "$path" >> "$initrd_dir/modules.list"
}

# Print the start of the init script: busybox's commands, /proc, /sys and /dev, fail MESSAGE
# (prints "NAME: MESSAGE" and powers off), the modules of modules.list loaded, and this
# machine's root mounted read-only under a RAM overlay at /newroot. What follows can use $O9P,
# the 9p mount options, and fail.
initramfs_init_head() { # name
  cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
EOF
  # shellcheck disable=SC2016  # $* is the init's, not expanded here
  printf 'fail() { echo "%s: $*"; sleep 1; poweroff -f; }\n' "$1"
  cat <<'EOF'
while read -r m; do insmod "/lib/modules/$m" || fail "insmod $m"; done </modules.list
O9P="trans=virtio,version=9p2000.L,msize=512000"
mount -t 9p -o "$O9P,ro,cache=mmap" hostroot /lower || fail "mount hostroot"
mount -t tmpfs -o mode=755 tmpfs /upper
mkdir -p /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /newroot || fail "mount overlay"
EOF
}

# Make the init executable and pack the initramfs into OUTPUT (gzip'd cpio).
initramfs_pack() { # output
  chmod 0755 "$initrd_dir/init"
  (cd "$initrd_dir" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$1"
}
