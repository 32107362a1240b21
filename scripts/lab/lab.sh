#!/usr/bin/env bash
# Two-host virtual BLE lab: entry point.
#
#   lab.sh setup                 install packages, fetch + unpack the guest kernel, build the initramfs
#   lab.sh up [--no-controller a|b]   boot guests a and b (each its own kernel, bluetoothd, controller)
#   lab.sh run --a CMD --b CMD [--deadline S] [--b-after-a REGEX] ...
#   lab.sh sh HOST CMD           run one command on a guest, print its output
#   lab.sh fault HOST|link FAULT start a fault (power-off, power-on, restart-bluetoothd, cut, ...)
#   lab.sh status | down
#   lab.sh suite [NAMES...]      setup + up + every scenario (or the named ones) + down
#   lab.sh demo [MESSAGE]        the README's main job: send on a, receive on b
#
# Everything except `setup` is implemented in lab.py (python3, stdlib only).
set -euo pipefail

LAB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$LAB_DIR/../.." && pwd)"
LAB_CACHE="${LAB_CACHE:-$REPO/.lab-cache}"
export LAB_DIR REPO LAB_CACHE

say() { printf 'lab: %s\n' "$*" >&2; }
die() { printf 'lab: error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
        die "need root for: $*"; fi
}

# Host packages the lab needs. The guests chroot into the host's root over 9p, so every tool a
# guest runs (bluetoothd, btvirt, btattach, btmon, l2test, socat, dbus-daemon, python) must be
# installed on the host, even though the host kernel itself may have no Bluetooth at all.
HOST_PACKAGES=(qemu-system-x86 busybox-static bluez bluez-test-tools socat dbus cpio kmod
               python3 python3-venv util-linux)

setup_packages() {
    local missing=() p
    for p in "${HOST_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then say "packages: all present"; return; fi
    say "packages: installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >"$LAB_CACHE/apt.log" 2>&1 || { tail -20 "$LAB_CACHE/apt.log"; die "apt-get install failed"; }
}

# The guest kernel: Debian's linux-image-amd64 resolves to linux-image-<abi>-amd64. It is
# downloaded and unpacked into the cache, never installed on the host.
setup_kernel() {
    local pkg deb
    pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
    [ -n "$pkg" ] || { as_root apt-get update -qq; pkg="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"; }
    [ -n "$pkg" ] || die "cannot resolve linux-image-amd64 to a kernel package"
    local kver="${pkg#linux-image-}"
    if [ -f "$LAB_CACHE/kernel/boot/vmlinuz-$kver" ] && [ -f "$LAB_CACHE/kernel/lib/modules/$kver/modules.dep" ]; then
        say "kernel: $kver cached"
    else
        mkdir -p "$LAB_CACHE/deb"
        deb="$(ls "$LAB_CACHE/deb/${pkg}_"*.deb 2>/dev/null | head -1 || true)"
        if [ -z "$deb" ]; then
            say "kernel: downloading $pkg"
            (cd "$LAB_CACHE/deb" && apt-get download "$pkg" >/dev/null 2>&1) \
                || (cd "$LAB_CACHE/deb" && as_root apt-get update -qq && apt-get download "$pkg" >/dev/null) \
                || die "apt-get download $pkg failed"
            deb="$(ls "$LAB_CACHE/deb/${pkg}_"*.deb | head -1)"
        fi
        rm -rf "$LAB_CACHE/kernel.new"
        mkdir -p "$LAB_CACHE/kernel.new"
        dpkg-deb -x "$deb" "$LAB_CACHE/kernel.new"
        # The package's postinst would run depmod; we run it against the unpacked tree.
        depmod -b "$LAB_CACHE/kernel.new" "$kver"
        rm -rf "$LAB_CACHE/kernel"
        mv "$LAB_CACHE/kernel.new" "$LAB_CACHE/kernel"
        say "kernel: $kver unpacked"
    fi
    echo "$kver" >"$LAB_CACHE/kernel.version"
}

# Modules the guest loads, dependencies first (resolved through modules.dep).
GUEST_MODULES=(virtio_pci virtio_console 9pnet_virtio 9p
               af_alg algif_hash algif_skcipher cmac ecb
               bluetooth hci_uart)

module_closure() {  # $1 = modules dir; prints relative .ko paths, each once, deps before users
    local mdir="$1"; shift
    python3 - "$mdir" "$@" <<'EOF'
import sys, os
mdir, wanted = sys.argv[1], sys.argv[2:]
deps = {}
for line in open(os.path.join(mdir, "modules.dep")):
    path, _, rest = line.partition(":")
    deps[path] = rest.split()
byname = {os.path.basename(p).split(".ko")[0].replace("-", "_"): p for p in deps}
order, seen = [], set()
def visit(p):
    if p in seen: return
    seen.add(p)
    for d in reversed(deps[p]): visit(d)
    order.append(p)
for w in wanted:
    if w not in byname: sys.exit(f"module {w} not found in {mdir}")
    visit(byname[w])
print("\n".join(order))
EOF
}

# What the initramfs is built from; lab.py checks its first part against guest/init too.
initramfs_stamp() {
    echo "$(cat "$LAB_DIR/guest/init" /bin/busybox | md5sum | cut -c1-12)-$(cat "$LAB_CACHE/kernel.version" 2>/dev/null)-${GUEST_MODULES[*]}"
}

initramfs_current() {
    [ -f "$LAB_CACHE/initramfs.cpio.gz" ] && [ "$(cat "$LAB_CACHE/initramfs.cpio.gz.stamp" 2>/dev/null)" = "$(initramfs_stamp)" ]
}

setup_initramfs() {
    local kver mdir work out stamp
    kver="$(cat "$LAB_CACHE/kernel.version")"
    mdir="$LAB_CACHE/kernel/lib/modules/$kver"
    out="$LAB_CACHE/initramfs.cpio.gz"
    stamp="$(initramfs_stamp)"
    if initramfs_current; then
        say "initramfs: cached"; return
    fi
    work="$(mktemp -d)"
    mkdir -p "$work"/{bin,proc,sys,dev,newroot,lib/modules}
    cp /bin/busybox "$work/bin/busybox"
    cp "$LAB_DIR/guest/init" "$work/init"
    chmod 755 "$work/init"
    module_closure "$mdir" "${GUEST_MODULES[@]}" >"$work/modules.list"
    local m
    while read -r m; do
        mkdir -p "$work/lib/modules/$(dirname "$m")"
        cp "$mdir/$m" "$work/lib/modules/$m"
    done <"$work/modules.list"
    (cd "$work" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1 >"$out.new")
    mv "$out.new" "$out"
    echo "$stamp" >"$out.stamp"
    rm -rf "$work"
    say "initramfs: built ($(wc -l <"$LAB_CACHE/kernel/lib/modules/$kver/modules.dep" >/dev/null; du -h "$out" | cut -f1), modules: $(tr '\n' ' ' < <(module_closure "$mdir" "${GUEST_MODULES[@]}" | xargs -n1 basename | sed 's/\.ko$//')))"
}

# Python for the third-party peers (bleak central, bless peripheral). Guests run it through the
# read-only 9p root, as root, so any interpreter on the host works. Prefer one that already has
# both packages (LAB_PYTHON, then python3 on PATH); otherwise make a venv in the cache.
setup_python() {
    local py
    for py in "${LAB_PYTHON:-}" "$LAB_CACHE/venv/bin/python3" "$(command -v python3 || true)" /usr/bin/python3; do
        [ -n "$py" ] && [ -x "$py" ] || continue
        if "$py" -c 'import bleak, bless' 2>/dev/null; then
            py="$("$py" -c 'import sys; print(sys.executable)')"
            say "python: $py has bleak + bless"
            echo "$py" >"$LAB_CACHE/python.path"; return
        fi
    done
    say "python: creating venv $LAB_CACHE/venv with bleak + bless"
    /usr/bin/python3 -m venv "$LAB_CACHE/venv"
    "$LAB_CACHE/venv/bin/pip" install -q bleak bless >"$LAB_CACHE/pip.log" 2>&1 \
        || { tail -20 "$LAB_CACHE/pip.log"; die "pip install bleak bless failed"; }
    echo "$LAB_CACHE/venv/bin/python3" >"$LAB_CACHE/python.path"
}

setup() {
    mkdir -p "$LAB_CACHE"
    setup_packages
    setup_kernel
    setup_initramfs
    setup_python
    say "setup done (cache: $LAB_CACHE)"
}

cmd="${1:-help}"
case "$cmd" in
    setup) shift; setup "$@" ;;
    suite)
        shift
        [ "${LAB_SKIP_SETUP:-0}" = 1 ] || setup
        exec python3 "$LAB_DIR/scenarios.py" "$@" ;;
    help|-h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' ;;
    *)
        # A cache from an earlier guest/init (or none) is brought up to date first.
        if ! initramfs_current; then setup; fi
        exec python3 "$LAB_DIR/lab.py" "$@" ;;
esac
