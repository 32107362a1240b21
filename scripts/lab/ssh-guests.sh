#!/usr/bin/env bash
# Two lab guests that behave like two real hosts: systemd as PID 1 with its own udev, D-Bus and
# bluetoothd, sshd on a loopback port of this machine, and one emulated controller each on the
# same "air" (btvirt on guest a, guest b's controller bridged to it as in the virtual lab). The
# Debian package is installed over SSH, the controllers are plugged in after it so udev starts
# the daemons, and scripts/lab/hw.sh runs against the guests exactly as against two real hosts.
#
#   scripts/lab/ssh-guests.sh check --deb PATH [SCENARIO...]   up, install, hw.sh, down
#   scripts/lab/ssh-guests.sh up [--deb PATH]                  boot (and install); prints the ssh targets
#   scripts/lab/ssh-guests.sh down                             stop the guests of the last `up`
#
# Default scenarios: bletransfer-status peers-text (fault-power and the rest on request: the
# virtual lab's suite runs them too; CI keeps this tier short). Guests see this machine's root
# read-only (9p) under a writable overlay in RAM, so nothing here changes; sshd comes from the
# openssh-server package, unpacked into the run folder (apt-get download) when this machine has
# none. Environment: LAB_CACHE (the guest kernel, as scripts/lab/lab.sh setup leaves it),
# LAB_MEM_MB (768), SSH_GUEST_PORTS ("10022 10023": the loopback ports of a and b).
# Ends with "ssh-guests: N passed, M failed"; exits non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
lab_dir="$repo/scripts/lab"
case "$repo" in *[[:space:]]*) echo "ssh-guests: the checkout $repo has a space in its path, which the guests' kernel command line cannot carry: clone into a path without spaces" >&2; exit 1 ;; esac

action=${1:-}
[ $# -gt 0 ] && shift
deb="" scenarios=()
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb=$(realpath "$2"); shift 2 ;;
    -*) echo "ssh-guests: unknown option '$1'" >&2; exit 64 ;;
    *) scenarios+=("$1"); shift ;;
  esac
done
case "$action" in check|up|down) ;; *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 64 ;; esac
[ "${#scenarios[@]}" -gt 0 ] || scenarios=(bletransfer-status peers-text)
read -r port_a port_b <<<"${SSH_GUEST_PORTS:-10022 10023}"
state_file="$repo/lab-out/ssh-guests.last"

passed=0 failed=0
check() { # description command…
  local description="$1"; shift
  if "$@" >"$run/check.out" 2>&1; then
    passed=$((passed + 1)); echo "ok   $description"
  else
    failed=$((failed + 1)); echo "FAIL $description"; sed 's/^/     /' "$run/check.out" | tail -n 20
  fi
}
die() { echo "ssh-guests: $*" >&2; echo "ssh-guests: $passed passed, $((failed + 1)) failed"; exit 1; }

down() { # run folder
  local pidfile pid
  for pidfile in "$1"/*/qemu.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    # Only a QEMU of this run: its command line names the run folder.
    if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$1"; then
      kill "$pid" 2>/dev/null
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$pidfile"
  done
}
if [ "$action" = down ]; then
  [ -f "$state_file" ] || { echo "ssh-guests: no guests were started (no $state_file)"; exit 0; }
  down "$(cat "$state_file")"; rm -f "$state_file"; echo "ssh-guests: stopped"; exit 0
fi

# ---- what the guests need from this machine -------------------------------------------------
kernel_tree="${LAB_CACHE:-$repo/.lab-cache}/kernel"
vmlinuz=$(ls "$kernel_tree"/boot/vmlinuz-* 2>/dev/null | head -n 1)
[ -n "$vmlinuz" ] || die "no guest kernel in $kernel_tree (scripts/lab/lab.sh setup, or set LAB_CACHE)"
kver="${vmlinuz##*/vmlinuz-}"
moddir="$kernel_tree/lib/modules/$kver"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing (apt-get install qemu-system-x86)"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && file -L "$busybox" 2>/dev/null | grep -q static || busybox=/bin/busybox
[ -x "$busybox" ] || die "busybox-static is missing"
[ -x /lib/systemd/systemd ] || die "systemd is not installed on this machine (the guests boot it from here)"
for tool in btvirt btattach ssh ssh-keygen; do command -v "$tool" >/dev/null || die "$tool is missing"; done
[ "$action" = up ] || [ -n "$deb" ] || die "check needs --deb PATH (scripts/package-deb.sh prints it)"

run="$repo/lab-out/ssh-guests-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run/a" "$run/b" "$run/sock"
echo "$run" > "$state_file"
trap '[ "$action" = check ] && down "$run"' EXIT

# sshd: this machine's, or the package unpacked into the run folder (nothing is installed here).
sshd=/usr/sbin/sshd sftp=/usr/lib/openssh/sftp-server
if [ ! -x "$sshd" ]; then
  mkdir -p "$run/openssh"
  (cd "$run/openssh" && apt-get download openssh-server openssh-sftp-server >/dev/null 2>&1) ||
    die "cannot fetch openssh-server with apt-get download"
  for f in "$run"/openssh/*.deb; do dpkg-deb -x "$f" "$run/openssh/root"; done
  sshd="$run/openssh/root/usr/sbin/sshd" sftp="$run/openssh/root/usr/lib/openssh/sftp-server"
fi
ssh-keygen -q -t ed25519 -N '' -C ssh-guests -f "$run/id_ed25519" || die "ssh-keygen failed"
cp "$run/id_ed25519.pub" "$run/authorized_keys"
for h in a b; do
  ssh-keygen -q -t ed25519 -N '' -C "guest-$h" -f "$run/$h/ssh_host_ed25519_key"
  port=$port_a; [ "$h" = b ] && port=$port_b
  echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$run/$h/ssh_host_ed25519_key.pub")" >> "$run/known_hosts"
  cat > "$run/$h/sshd_config" <<EOF
Port 22
HostKey $run/$h/ssh_host_ed25519_key
AuthorizedKeysFile $run/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The key files live on the 9p share, owned as on this machine.
StrictModes no
Subsystem sftp $sftp
EOF
done
ssh_opts=(-o BatchMode=yes -o ConnectTimeout=10 -i "$run/id_ed25519" -o IdentitiesOnly=yes
          -o UserKnownHostsFile="$run/known_hosts" -o StrictHostKeyChecking=yes -o LogLevel=ERROR)
ssh_to() { local port=$port_a; [ "$1" = b ] && port=$port_b; shift; ssh "${ssh_opts[@]}" -p "$port" root@127.0.0.1 "$@"; }

# ---- initramfs: modules, then an overlay root over this machine's and systemd --------------
# shellcheck source=scripts/lab/initramfs_lib.sh
. "$lab_dir/initramfs_lib.sh"
initrd_dir="$run/initramfs"
initramfs_start
for module in virtio_pci virtio_net virtio_console 9pnet_virtio 9p overlay af_alg algif_hash \
    algif_skcipher cmac ecb bluetooth hci_uart; do initramfs_add_module "$module"; done
{
  initramfs_init_head ssh-guest-init
  cat <<'EOF'
for arg in $(cat /proc/cmdline); do
  case "$arg" in guest.run=*) RUN="${arg#guest.run=}" ;; guest.host=*) HOST="${arg#guest.host=}" ;;
    guest.repo=*) REPO="${arg#guest.repo=}" ;; esac
done
for d in tmp var/tmp; do mount -t tmpfs -o mode=1777 tmpfs "/newroot/$d"; done
# The checkout (read-only) and the run folder at the same paths as here, over the guest's own
# /tmp and /var/tmp: a clone anywhere works.
mkdir -p "/newroot$REPO" && mount -t 9p -o "$O9P,ro,cache=mmap" repo "/newroot$REPO" || fail "mount the checkout at $REPO"
mkdir -p "/newroot$RUN" && mount -t 9p -o "$O9P,rw,cache=none" run "/newroot$RUN" || fail "mount run folder"
echo "lab-$HOST" > /newroot/etc/hostname
# Configured as README.md tells hosts that talk to Apple-format peers: one ATT channel, so
# EATT cannot reorder notifications (the peers-* scenarios expect it, as in the virtual lab).
sed -i 's/^#\{0,1\}Channels *=.*/Channels = 1/' /newroot/etc/bluetooth/main.conf
# This machine's own services stay off; the guest's units come from the run folder.
cd /newroot/etc/systemd/system
for unit in postgresql.service e2scrub_reap.service getty@tty1.service serial-getty@ttyS0.service \
    apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
    man-db.timer systemd-timesyncd.service systemd-pstore.service remote-fs.target ssh.service \
    networking.service; do
  ln -sf /dev/null "$unit"
done
mkdir -p multi-user.target.wants
for unit in "/newroot$RUN/$HOST/units/"*; do
  cp "$unit" .
  case "$unit" in *.service) grep -q '^WantedBy=multi-user.target' "$unit" &&
    ln -sf "../$(basename "$unit")" multi-user.target.wants/ ;; esac
done
cd /
exec switch_root /newroot /lib/systemd/systemd --log-target=console --show-status=0
EOF
} > "$initrd_dir/init"
initramfs_pack "$run/initramfs.cpio.gz"

# ---- the guests' own units ------------------------------------------------------------------
for h in a b; do
  mkdir -p "$run/$h/units"
  cat > "$run/$h/units/guest-net.service" <<'EOF'
[Unit]
Description=QEMU user network (10.0.2.15, gateway 10.0.2.2)
DefaultDependencies=no
Before=network.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link set lo up
ExecStart=/sbin/ip link set eth0 up
ExecStart=/sbin/ip addr add 10.0.2.15/24 dev eth0
ExecStart=/sbin/ip route add default via 10.0.2.2
[Install]
WantedBy=multi-user.target
EOF
  cat > "$run/$h/units/guest-sshd.service" <<EOF
[Unit]
Description=sshd for scripts/lab/hw.sh
After=guest-net.service
Requires=guest-net.service
[Service]
# sshd's privilege separation user, which openssh-server's own scripts would create.
ExecStartPre=/bin/systemd-sysusers --inline "u sshd - \"sshd privilege separation\" /run/sshd /usr/sbin/nologin"
ExecStart=$sshd -D -e -f $run/$h/sshd_config
RuntimeDirectory=sshd
RuntimeDirectoryPreserve=yes
[Install]
WantedBy=multi-user.target
EOF
  # The controller is plugged in over SSH once the package is installed (not at boot), so
  # that udev, not the package's postinst, is what starts the daemon.
  if [ "$h" = a ]; then
    cat > "$run/$h/controller.sh" <<EOF
#!/bin/bash
# Guest a: BlueZ's controller emulator (one controller per connection, one shared air) and
# the lab's radio in front of it (guest/hci_radio.py, profile LAB_LINK): this guest's
# controller through a pty, guest b's bridged in over the virtio port "lab.peer".
set -u
rm -f /tmp/bt-server-*
btvirt -s &
for _ in \$(seq 100); do [ -S /tmp/bt-server-bredrle ] && break; sleep 0.1; done
for p in /sys/class/virtio-ports/*; do [ "\$(cat "\$p/name")" = lab.peer ] && port=/dev/\$(basename "\$p"); done
mkdir -p /run/lab
python3 $lab_dir/guest/hci_radio.py --profile ${LAB_LINK:-linux-default} --control /run/lab/radio.sock \\
    --pty-link /run/lab/ttyBT --device "\$port" --attach a,b &
for _ in \$(seq 100); do [ -e /run/lab/ttyBT ] && break; sleep 0.1; done
btattach -B /run/lab/ttyBT -P h4 &
wait -n
EOF
  else
    cat > "$run/$h/controller.sh" <<'EOF'
#!/bin/bash
# Guest b: the controller is guest a's emulator, reached over the virtio console.
exec btattach -B /dev/hvc0 -P h4
EOF
  fi
  chmod 0755 "$run/$h/controller.sh"
  cat > "$run/$h/units/guest-controller.service" <<EOF
[Unit]
Description=emulated Bluetooth controller (plugged in by ssh-guests.sh)
[Service]
ExecStart=$run/$h/controller.sh
EOF
done

# ---- boot -----------------------------------------------------------------------------------
mem=${LAB_MEM_MB:-768}
for h in a b; do
  port=$port_a; [ "$h" = b ] && port=$port_b
  cmd=(qemu-system-x86_64 -name "ssh-guest-$h" -accel tcg -cpu max -smp 1 -m "$mem"
       -machine pc -nodefaults -no-user-config -display none -no-reboot
       -kernel "$vmlinuz" -initrd "$run/initramfs.cpio.gz"
       -append "console=ttyS0 quiet loglevel=3 panic=-1 net.ifnames=0 guest.host=$h guest.run=$run guest.repo=$repo"
       -serial "file:$run/$h/console.log"
       -fsdev local,id=hostroot,path=/,readonly=on,security_model=none,multidevs=remap
       -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
       -fsdev "local,id=repo,path=${repo//,/,,},readonly=on,security_model=none,multidevs=remap"
       -device virtio-9p-pci,fsdev=repo,mount_tag=repo
       -fsdev "local,id=run,path=${run//,/,,},security_model=none"
       -device virtio-9p-pci,fsdev=run,mount_tag=run
       -netdev "user,id=net0,hostfwd=tcp:127.0.0.1:$port-:22"
       -device virtio-net-pci,netdev=net0
       -device virtio-serial-pci,id=vser0)
  if [ "$h" = a ]; then
    cmd+=(-chardev "socket,id=peer,path=$run/sock/peer.sock,server=on,wait=off"
          -device virtserialport,bus=vser0.0,chardev=peer,name=lab.peer)
  else
    cmd+=(-chardev "socket,id=peer,path=$run/sock/peer.sock,reconnect=1"
          -device virtconsole,bus=vser0.0,chardev=peer,name=lab.peer)
  fi
  "${cmd[@]}" >"$run/$h/qemu.log" 2>&1 &
  echo $! > "$run/$h/qemu.pid"
  [ "$h" = a ] && for _ in $(seq 50); do [ -S "$run/sock/peer.sock" ] && break; sleep 0.1; done
done
boot_started=$SECONDS
for h in a b; do
  until ssh_to "$h" true 2>/dev/null; do
    kill -0 "$(cat "$run/$h/qemu.pid")" 2>/dev/null || die "guest $h stopped during boot (see $run/$h/console.log)"
    [ $((SECONDS - boot_started)) -lt 600 ] || die "guest $h: no ssh on 127.0.0.1 within 600 s (see $run/$h/console.log)"
    sleep 3
  done
done
guest_is_systemd() { ssh_to "$1" 'test "$(cat /proc/1/comm)" = systemd'; }
check "both guests boot systemd and answer ssh on 127.0.0.1:$port_a and :$port_b ($((SECONDS - boot_started))s)" \
  eval 'guest_is_systemd a && guest_is_systemd b'

# ---- the package, over SSH ------------------------------------------------------------------
if [ -n "$deb" ]; then
  unit=bletransfer-receiver@hci0.service
  for h in a b; do
    # man-db's trigger rebuilds the whole manual index, minutes in an emulated guest reading
    # this machine's /usr over 9p; the guest is thrown away, so its index may stay stale.
    check "guest $h: dpkg -i over ssh" \
      ssh_to "$h" 'rm -f /var/lib/man-db/auto-update && cat > /tmp/bletransfer.deb && dpkg -i /tmp/bletransfer.deb > /tmp/dpkg.log 2>&1; status=$?; cat /tmp/dpkg.log; exit $status' < "$deb"
    check "guest $h: the install printed the service's public key line" \
      ssh_to "$h" 'grep -qxF "bletransfer: the service'"'"'s public key: $(bletransfer id --identity /var/lib/bletransfer/identity | head -n 1)" /tmp/dpkg.log'
    # Nothing is configured yet: udev asks for the unit, whose ExecCondition= skips it (not a
    # failure, no retry) with one journal line saying what to configure.
    check "guest $h: controller plugged in, udev asks for $unit, skipped: no role chosen (ExecCondition=)" \
      ssh_to "$h" "systemctl start guest-controller.service &&
        for i in \$(seq 120); do
          [ \"\$(systemctl show -P Result $unit)\" = exec-condition ] &&
            journalctl -b --no-pager -u $unit | grep -q 'not started: no role chosen' && exit 0
          sleep 1
        done
        systemctl status --no-pager $unit; journalctl -b --no-pager -n 40; exit 1"
    check "guest $h: $unit is skipped, not failed" \
      ssh_to "$h" "! systemctl is-failed --quiet $unit"
  done
  # Configure, as docs/packaging.md says: the role in one line, the other's public key line.
  key_a=$(ssh_to a 'bletransfer id --identity /var/lib/bletransfer/identity | head -n 1')
  key_b=$(ssh_to b 'bletransfer id --identity /var/lib/bletransfer/identity | head -n 1')
  choose_receiver="sed -i 's/^BLETRANSFER_ROLE=.*/BLETRANSFER_ROLE=receiver/' /etc/default/bletransfer && grep -qx BLETRANSFER_ROLE=receiver /etc/default/bletransfer"
  check "each guest chooses the receiver role in one line and lists the other's service key" \
    eval 'ssh_to a "$choose_receiver" && ssh_to b "$choose_receiver" &&
      ssh_to a "echo \"$key_b\" >> /etc/bletransfer/authorized-peers" && ssh_to b "echo \"$key_a\" >> /etc/bletransfer/authorized-peers"'
  for h in a b; do
    check "guest $h: on a receiver host the sender unit stays skipped, one line saying so" \
      ssh_to "$h" "systemctl restart bletransfer-sender@hci0.service;
        [ \"\$(systemctl show -P Result bletransfer-sender@hci0.service)\" = exec-condition ] &&
        journalctl -b --no-pager -u bletransfer-sender@hci0.service | grep -q \"not started: this host's role is receiver\""
    check "guest $h: with the peer's key listed, $unit starts and stays up" \
      ssh_to "$h" "systemctl restart $unit &&
        for i in \$(seq 60); do systemctl is-active --quiet $unit && sleep 5 && systemctl is-active --quiet $unit && exit 0; sleep 1; done
        systemctl status --no-pager $unit; journalctl -b --no-pager -n 40; exit 1"
    check "guest $h: the daemon runs as user bletransfer and reports a status" \
      ssh_to "$h" 'for i in $(seq 60); do systemctl show -P StatusText bletransfer-receiver@hci0.service | grep -q . && break; sleep 1; done
        ps -o user= -p "$(systemctl show -P MainPID bletransfer-receiver@hci0.service)" | grep -qx bletransfer &&
        systemctl show -P StatusText bletransfer-receiver@hci0.service | grep .'
  done
  # The service's one privileged step (ExecStartPre=+ bletransfer link tune) tuned each adapter
  # while the daemon runs unprivileged: `link show` reads it without privilege, and a message to
  # b's daemon runs on a link of 7.5-15 ms (the radio on a logs each link it makes).
  for h in a b; do
    check "guest $h: the service tuned the adapter (link show, unprivileged: tuned)" \
      ssh_to "$h" 'runuser -u bletransfer -- bletransfer link show | head -n 1 | grep -q ": tuned"'
  done
  check "a message to b's unprivileged receiver daemon runs on the tuned link (the radio's log on a: 15 ms)" \
    ssh_to a 'before=$(journalctl -b --no-pager -u guest-controller.service | grep -c "hci_radio: link .*: ")
      bletransfer send --identity /var/lib/bletransfer/identity --no-tune --timeout 120 "to the service" >/dev/null 2>&1 || exit 1
      journalctl -b --no-pager -u guest-controller.service | grep "hci_radio: link .*: " | tail -n +$((before + 1)) | grep -E "interval 15 ms|· 15 ms"'
  # hw.sh drives both ends itself: a receiver daemon on either host would take its messages.
  for h in a b; do ssh_to "$h" systemctl stop bletransfer-receiver@hci0.service; done
fi

targets=(--a "ssh://root@127.0.0.1:$port_a" --b "ssh://root@127.0.0.1:$port_b")
export HW_SSH_OPTIONS="-i $run/id_ed25519 -o IdentitiesOnly=yes -o UserKnownHostsFile=$run/known_hosts -o StrictHostKeyChecking=yes -o LogLevel=ERROR"
if [ "$action" = up ]; then
  trap - EXIT
  echo "ssh-guests: up; logs in $run. For example:"
  echo "  HW_SSH_OPTIONS='$HW_SSH_OPTIONS' BLETRANSFER_BIN=/usr/bin/bletransfer scripts/lab/hw.sh ${targets[*]} bletransfer-status"
  echo "  ssh ${ssh_opts[*]} -p $port_a root@127.0.0.1"
  echo "ssh-guests: $passed passed, $failed failed"
  exit $((failed > 0))
fi

# ---- hw.sh, as a person runs it against two hosts -------------------------------------------
hw_started=$SECONDS
BLETRANSFER_BIN=/usr/bin/bletransfer bash "$lab_dir/hw.sh" "${targets[@]}" "${scenarios[@]}" 2>&1 | tee "$run/hw.log"
hw_status=${PIPESTATUS[0]}
for s in "${scenarios[@]}"; do
  check "hw.sh over ssh: $s passed" grep -Eq "^  PASS $s " "$run/hw.log"
done
check "hw.sh exits 0 ($((SECONDS - hw_started))s)" test "$hw_status" -eq 0
echo "ssh-guests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
