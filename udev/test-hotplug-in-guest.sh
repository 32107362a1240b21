#!/usr/bin/env bash
# Checks the udev rule and the systemd units where they really run: a QEMU guest with systemd
# as PID 1 and its own udev. The guest sees this machine's root read-only (9p) under a
# writable overlay in RAM, so nothing here changes. In the guest, scripts/install-service.sh
# installs the units and the rule with a stand-in daemon (a few lines of Python that speak the
# notify protocol and report what they may do); then a virtual controller is plugged in
# (hci_vhci: opening /dev/vhci creates hciN, closing it removes it) and out again.
#
#   udev/test-hotplug-in-guest.sh [--kernel-tree DIR] [--out DIR] [--role receiver|sender]
#
#   --kernel-tree  an unpacked Debian kernel package: boot/vmlinuz-*, lib/modules/*
#                  (default: $LAB_CACHE/kernel, as scripts/lab/lab.sh setup leaves it)
#   --out          where the guest writes its report (default: lab-out/hotplug-<time>)
#
# Checks: plugging starts bletransfer-<role>@hci0.service (active, READY=1 seen, status line
# set); it runs as user bletransfer (not in group bluetooth: its D-Bus policy file instead),
# with its memory and task limits, can write its data directory and
# nothing else, can read its identity and /etc/bletransfer/authorized-peers; unplugging stops it. Ends with "hotplug: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

kernel_tree="${LAB_CACHE:-$repo/.lab-cache}/kernel"
out="$repo/lab-out/hotplug-$(date +%Y%m%d-%H%M%S)"
role=receiver
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel-tree) kernel_tree="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --role) role="$2"; shift 2 ;;
    *) echo "test-hotplug-in-guest: unknown option '$1'" >&2; exit 64 ;;
  esac
done
case "$role" in receiver|sender) ;; *) echo "test-hotplug-in-guest: --role receiver|sender" >&2; exit 64 ;; esac
die() { echo "test-hotplug-in-guest: $*" >&2; echo "hotplug: 0 passed, 1 failed"; exit 1; }

vmlinuz=$(ls "$kernel_tree"/boot/vmlinuz-* 2>/dev/null | head -n 1)
[ -n "$vmlinuz" ] || die "no kernel in $kernel_tree (run scripts/lab/lab.sh setup, or pass --kernel-tree)"
kver="${vmlinuz##*/vmlinuz-}"
moddir="$kernel_tree/lib/modules/$kver"
[ -f "$moddir/modules.dep" ] || die "no modules.dep in $moddir"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing (apt-get install qemu-system-x86)"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && file -L "$busybox" 2>/dev/null | grep -q static || busybox=/bin/busybox
[ -x "$busybox" ] || die "busybox-static is missing"
[ -x /lib/systemd/systemd ] || die "systemd is not installed on this machine (the guest boots it from here)"
case "$out" in /tmp/*) die "--out must be outside /tmp (the guest has its own /tmp)" ;; esac
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# --- initramfs: busybox, the modules, an init that builds the overlay root and starts systemd
# shellcheck source=scripts/lab/initramfs_lib.sh
. "$repo/scripts/lab/initramfs_lib.sh"
initrd_dir="$out/initramfs"
rm -rf "$initrd_dir"
initramfs_start
for module in virtio_pci 9pnet_virtio 9p overlay bluetooth hci_vhci; do initramfs_add_module "$module"; done

{
  initramfs_init_head hotplug-init
  cat <<'EOF'
for arg in $(cat /proc/cmdline); do
  case "$arg" in hotplug.out=*) OUT="${arg#hotplug.out=}" ;; hotplug.repo=*) REPO="${arg#hotplug.repo=}" ;; esac
done
for d in tmp run var/tmp; do mount -t tmpfs -o mode=1777 tmpfs "/newroot/$d"; done
# The checkout (read-only) and the output folder at the same paths as here, over the guest's own
# /tmp, /run and /var/tmp: a clone anywhere works.
mkdir -p "/newroot$REPO" && mount -t 9p -o "$O9P,ro,cache=mmap" hotplugrepo "/newroot$REPO" || fail "mount the checkout"
mkdir -p "/newroot$OUT" && mount -t 9p -o "$O9P,rw,cache=none" hotplugout "/newroot$OUT" || fail "mount out"
chmod 755 /newroot/run
# Only what the check needs starts: the host's own services stay off in the guest.
cd /newroot/etc/systemd/system
for unit in postgresql.service e2scrub_reap.service getty@tty1.service serial-getty@ttyS0.service \
    apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
    man-db.timer systemd-timesyncd.service systemd-pstore.service remote-fs.target; do
  ln -sf /dev/null "$unit"
done
cp "/newroot$OUT/hotplug-check.service" hotplug-check.service
mkdir -p multi-user.target.wants
ln -sf ../hotplug-check.service multi-user.target.wants/hotplug-check.service
cd /
exec switch_root /newroot /lib/systemd/systemd --log-target=console --show-status=0
EOF
} > "$initrd_dir/init"
initramfs_pack "$out/initramfs.cpio.gz"

# --- what runs in the guest
cat > "$out/standin-daemon.py" <<'EOF'
#!/usr/bin/python3
# Stand-in for `bletransfer daemon` in the hot-plug check: speaks the notify protocol like the
# real daemon and records what the service sandbox lets it do. install-service.sh also runs
# `bletransfer keygen` and `bletransfer id`: the stand-in writes and prints a key line of the
# same shape (random bytes, not a key: this check is about the sandbox, not about keys).
import base64, os, signal, socket, sys, time
if sys.argv[1:2] in (["keygen"], ["id"]):
    path = sys.argv[sys.argv.index("--identity") + 1]
    if sys.argv[1] == "keygen":
        name = sys.argv[sys.argv.index("--name") + 1] if "--name" in sys.argv else "stand-in"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, ("bletransfer-x25519-private %s %s\n" % (base64.b64encode(os.urandom(32)).decode(), name)).encode())
        os.close(fd)
    with open(path) as f:
        _, key, name = f.read().split()
    print("bletransfer-x25519 %s %s" % (key, name))
    sys.exit(0)
def notify(text):
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(text.encode(), address)
args = sys.argv[1:]
data_dir = args[args.index("--output-dir") + 1] if "--output-dir" in args else args[args.index("--outbox") + 1]
report = []
report.append("args=" + " ".join(args))
report.append("uid=%d gid=%d groups=%s" % (os.getuid(), os.getgid(), ",".join(map(str, os.getgroups()))))
def try_write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        os.unlink(path)
        return "writable"
    except OSError as e:
        return "denied(%s)" % e.strerror
report.append("data_dir=" + try_write(os.path.join(data_dir, ".probe")))
def try_read(path):
    try:
        with open(path) as f:
            f.read()
        return "readable"
    except OSError as e:
        return "denied(%s)" % e.strerror
report.append("identity=" + try_read("/var/lib/bletransfer/identity"))
report.append("authorized_peers=" + try_read("/etc/bletransfer/authorized-peers"))
report.append("etc=" + try_write("/etc/bletransfer-probe"))
report.append("var_lib=" + try_write("/var/lib/bletransfer-probe"))
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close(); report.append("inet=allowed")
except OSError as e:
    report.append("inet=denied(%s)" % e.strerror)
try:
    socket.socket(31, socket.SOCK_RAW, 1).close(); report.append("bluetooth_socket=allowed")  # AF_BLUETOOTH, BTPROTO_HCI
except OSError as e:
    report.append("bluetooth_socket=denied(%s)" % e.strerror)
with open(os.environ["HOTPLUG_REPORT"], "w") as f:
    f.write("\n".join(report) + "\n")
def stop(*_):
    notify("STOPPING=1")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
notify("READY=1\nSTATUS=stand-in ready")
while True:
    notify("WATCHDOG=1")
    time.sleep(20)
EOF
chmod 0755 "$out/standin-daemon.py"

cat > "$out/hotplug-check.service" <<EOF
[Unit]
Description=bletransfer hot-plug check
After=multi-user.target systemd-udevd.service dbus.service
[Service]
Type=oneshot
StandardOutput=journal+console
ExecStart=/bin/bash $out/guest-check.sh
EOF

cat > "$out/guest-check.sh" <<EOF
#!/bin/bash
# Runs in the guest (as a systemd service); results go to $out/result.txt.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
out="$out"
repo="$repo"
role="$role"
EOF
cat >> "$out/guest-check.sh" <<'EOF'
unit="bletransfer-$role@hci0.service"
result="$out/result.txt"
: > "$result"
passed=0 failed=0
check() { # description command…
  local description="$1"; shift
  if "$@" >>"$out/details.txt" 2>&1; then passed=$((passed + 1)); echo "ok   $description" >>"$result"
  else failed=$((failed + 1)); echo "FAIL $description" >>"$result"; fi
}
wait_for() { # seconds command…
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do [ "$SECONDS" -lt "$deadline" ] || return 1; sleep 0.5; done
}
is_active() { [ "$(systemctl is-active "$unit")" = active ]; }
is_stopped() { ! systemctl is-active --quiet "$unit"; }

# The report path is handed to the stand-in through the environment file.
bash "$repo/scripts/install-service.sh" --role "$role" --binary "$out/standin-daemon.py" >>"$out/details.txt" 2>&1
check "install-service.sh succeeds in the guest" test -x /usr/local/bin/bletransfer
# The units start only once a peer is authorized (their ExecCondition=): the stand-in's own
# key line will do, the stand-in does no handshake.
"$out/standin-daemon.py" id --identity /var/lib/bletransfer/identity >> /etc/bletransfer/authorized-peers
check "the units' configuration check lets the $role start" runuser -u bletransfer -- sh -c \
  'set -a; . /etc/default/bletransfer; set +a; exec /usr/local/libexec/bletransfer/check-configuration "$0"' "$role"
echo "HOTPLUG_REPORT=/var/lib/bletransfer/$([ "$role" = receiver ] && echo inbox || echo outbox)/.hotplug-report" >> /etc/default/bletransfer
check "no controller before plugging" test ! -e /sys/class/bluetooth/hci0
check "unit inactive before plugging" is_stopped

# Plug: holding /dev/vhci open creates a controller, closing it removes it.
( exec 3<>/dev/vhci; exec sleep 600 ) &
holder=$!
check "controller hci0 appears" wait_for 20 test -e /sys/class/bluetooth/hci0
udevadm info /sys/class/bluetooth/hci0 >>"$out/details.txt" 2>&1
check "udev asks systemd for the unit" bash -c "udevadm info /sys/class/bluetooth/hci0 | grep -q 'SYSTEMD_WANTS=.*$unit'"
check "unit becomes active" wait_for 60 is_active
# The rule asks for both roles' units; the other role's is skipped by its ExecCondition=.
other=$([ "$role" = receiver ] && echo sender || echo receiver)
other_unit="bletransfer-$other@hci0.service"
other_skipped() { [ "$(systemctl show -p Result --value "$other_unit")" = exec-condition ] && ! systemctl is-failed --quiet "$other_unit"; }
check "the $other unit is skipped (Result=exec-condition), not failed" wait_for 30 other_skipped
journalctl --no-pager -u "$other_unit" >>"$out/details.txt" 2>&1
check "... with one journal line naming this host's role" bash -c "journalctl --no-pager -u $other_unit | grep -q \"not started: this host's role is $role (BLETRANSFER_ROLE in /etc/default/bletransfer), not $other\""
systemctl status --no-pager "$unit" >>"$out/details.txt" 2>&1
check "unit's status line comes from the daemon" bash -c "systemctl show -p StatusText --value $unit | grep -qx 'stand-in ready'"
report="/var/lib/bletransfer/$([ "$role" = receiver ] && echo inbox || echo outbox)/.hotplug-report"
check "daemon wrote its report" wait_for 20 test -s "$report"
cat "$report" >>"$out/details.txt" 2>&1
uid=$(id -u bletransfer); bt_gid=$(getent group bluetooth | cut -d: -f3)
check "runs as user bletransfer" grep -q "^uid=$uid " "$report"
check "runs without group bluetooth (its D-Bus policy file grants what it needs)" bash -c "! grep -Eq 'groups=(.*,)?${bt_gid:-none}(,|\$)' '$report'"
check "its D-Bus policy file is installed" test -f /etc/dbus-1/system.d/bletransfer.conf
check "memory is capped (MemoryMax=384M)" bash -c "[ \"\$(systemctl show -p MemoryMax --value $unit)\" = 402653184 ]"
check "tasks are capped (TasksMax=64)" bash -c "[ \"\$(systemctl show -p TasksMax --value $unit)\" = 64 ]"
check "may write its data directory" grep -qx "data_dir=writable" "$report"
check "may read its identity" grep -qx "identity=readable" "$report"
check "may read /etc/bletransfer/authorized-peers" grep -qx "authorized_peers=readable" "$report"
check "the identity is the service user's, mode 600" bash -c "[ \"\$(stat -c '%U %a' /var/lib/bletransfer/identity)\" = 'bletransfer 600' ]"
check "may not write /etc" grep -q "^etc=denied" "$report"
check "may not write elsewhere in /var/lib" grep -q "^var_lib=denied" "$report"
check "may not open internet sockets" grep -q "^inet=denied" "$report"
check "may open Bluetooth sockets" grep -qx "bluetooth_socket=allowed" "$report"

# Unplug.
kill "$holder"; wait "$holder" 2>/dev/null
check "controller hci0 goes away" wait_for 20 test ! -e /sys/class/bluetooth/hci0
check "unit stops when the controller goes" wait_for 60 is_stopped
systemctl status --no-pager "$unit" >>"$out/details.txt" 2>&1
check "unit stopped cleanly (not failed)" bash -c "[ \"\$(systemctl show -p Result --value $unit)\" = success ]"

# Plug again: the unit comes back.
( exec 3<>/dev/vhci; exec sleep 600 ) &
holder=$!
check "re-plugged controller starts the unit again" wait_for 60 is_active
kill "$holder"; wait "$holder" 2>/dev/null
check "and stops it again" wait_for 60 is_stopped

journalctl --no-pager -u "$unit" >>"$out/details.txt" 2>&1
echo "hotplug: $passed passed, $failed failed" >>"$result"
sync
systemctl poweroff --no-block
EOF

# --- boot
echo "test-hotplug-in-guest: booting the guest (systemd under TCG takes a minute or two)"
timeout 600 qemu-system-x86_64 -name bletransfer-hotplug -accel tcg -cpu max -smp 1 -m 1024 \
  -machine pc -nodefaults -no-user-config -display none -no-reboot \
  -kernel "$vmlinuz" -initrd "$out/initramfs.cpio.gz" \
  -append "console=ttyS0 panic=-1 hotplug.out=$out hotplug.repo=$repo systemd.show_status=0" \
  -serial "file:$out/console.log" \
  -fsdev local,id=hostroot,path=/,readonly=on,security_model=none,multidevs=remap \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -fsdev "local,id=hotplugrepo,path=${repo//,/,,},readonly=on,security_model=none,multidevs=remap" \
  -device virtio-9p-pci,fsdev=hotplugrepo,mount_tag=hotplugrepo \
  -fsdev "local,id=hotplugout,path=${out//,/,,},security_model=none" \
  -device virtio-9p-pci,fsdev=hotplugout,mount_tag=hotplugout
status=$?
[ "$status" -eq 0 ] || echo "test-hotplug-in-guest: qemu ended with status $status (console: $out/console.log)"
if [ -f "$out/result.txt" ] && grep -q '^hotplug: ' "$out/result.txt"; then
  cat "$out/result.txt"
  grep -q '^hotplug: [0-9]* passed, 0 failed' "$out/result.txt"
else
  echo "test-hotplug-in-guest: the guest wrote no result; last console lines:"
  tail -n 30 "$out/console.log" 2>/dev/null
  echo "hotplug: 0 passed, 1 failed"
  exit 1
fi
