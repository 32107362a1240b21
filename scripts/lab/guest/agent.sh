#!/bin/bash
# The lab agent: PID 1 of a guest after switch_root (it runs in the host's root, read-only).
# Brings up the guest's own system D-Bus and bluetoothd, then executes the commands the
# host sends over the virtio-serial port "lab.ctl": each line is the id of a script the host put
# in $LAB_OUT/ctl/$LAB_HOST/<id>.sh; stdout, stderr and the exit status land next to it.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 TERM=dumb
export LAB_HOST LAB_OUT LAB_DIR
HOSTDIR="$LAB_OUT/$LAB_HOST"
CTL="$LAB_OUT/ctl/$LAB_HOST"
mkdir -p "$HOSTDIR" "$CTL" /run/lab
mkfifo /run/lab/pause.fifo  # lab_pause's clock: nobody ever writes it
exec >>"$HOSTDIR/agent.log" 2>&1
echo "agent: up at $(cut -d' ' -f1 /proc/uptime)s, kernel $(uname -r)"
hostname "lab-$LAB_HOST"
ip link set lo up 2>/dev/null || busybox ip link set lo up 2>/dev/null

. "$LAB_DIR/guest/lib.sh"

lab_start_dbus
# btmon is started by the host when a capture is wanted (lab.py, Lab.set_capture).
lab_start_bluetoothd

port=""
for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = lab.ctl ] && port="/dev/$(basename "$p")"
done
[ -n "$port" ] || { echo "agent: no lab.ctl port"; sync; busybox poweroff -f; }

run_one() {  # $1 = id
    local id="$1"
    (
        setsid bash "$CTL/$id.sh" >"$CTL/$id.out" 2>"$CTL/$id.err" </dev/null
        echo $? >"$CTL/$id.rc.tmp"
        mv "$CTL/$id.rc.tmp" "$CTL/$id.rc"
    ) &
}

echo "agent: ready at $(cut -d' ' -f1 /proc/uptime)s, control port $port"
touch "$HOSTDIR/agent.ready"
exec 3<"$port"
while true; do
    if ! read -r line <&3; then sleep 0.2; continue; fi
    case "$line" in
        "") ;;
        shutdown)
            echo "agent: shutdown"
            lab_stop_all
            sync
            busybox poweroff -f ;;
        *[!A-Za-z0-9._-]*) echo "agent: ignoring bad id '$line'" ;;
        *) run_one "$line" ;;
    esac
done
