# Guest-side helpers, sourced by the agent and by every command script the host sends.
# Each function is one step a scenario or a fault can take; they print one line on failure.
# shellcheck source=scripts/lab/common_lib.sh
. "$LAB_DIR/common_lib.sh"  # lab_forget_devices
LAB_HOSTDIR="$LAB_OUT/$LAB_HOST"
BLUETOOTHD=/usr/libexec/bluetooth/bluetoothd
[ -x "$BLUETOOTHD" ] || BLUETOOTHD=/usr/sbin/bluetoothd
# A user the guest's D-Bus policy forbids to talk to org.bluez (the `unauthorized` state).
LAB_DENIED_USER=nobody

lab_log() { echo "[$LAB_HOST $(cut -d' ' -f1 /proc/uptime)] $*"; }

# Wait until a command succeeds, polling every 0.1 s. $1 = seconds, rest = command.
lab_wait() {
    local t="$1"; shift
    local end=$(( $(date +%s%N) / 1000000 + ${t%.*} * 1000 ))
    until "$@" >/dev/null 2>&1; do
        [ $(( $(date +%s%N) / 1000000 )) -lt $end ] || return 1
        sleep 0.1
    done
}

lab_bg() {  # $1 = name; rest = command; started detached, pid in /run/lab/<name>.pid
    local name="$1"; shift
    setsid "$@" >>"$LAB_HOSTDIR/$name.log" 2>&1 </dev/null &
    echo $! >"/run/lab/$name.pid"
}

# lab_bg for the chatty writers (bluetoothd -d, btmon): their output reaches the run folder in
# batches (log_batcher.py) instead of a 9p round trip per line, which under TCG took a share of
# the guest's one CPU in every connection. A tail read on failure may miss the last half second.
lab_bg_batched() {  # $1 = name; rest = command
    local name="$1"; shift
    setsid "$@" > >(exec python3 "$LAB_DIR/guest/log_batcher.py" "$LAB_HOSTDIR/$name.log") 2>&1 </dev/null &
    echo $! >"/run/lab/$name.pid"
}

lab_kill() {  # $1 = name; stops the process started by lab_bg
    local pid
    pid="$(cat "/run/lab/$1.pid" 2>/dev/null)" || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    rm -f "/run/lab/$1.pid"
}

lab_alive() { local pid; pid="$(cat "/run/lab/$1.pid" 2>/dev/null)" && kill -0 "$pid" 2>/dev/null; }

lab_start_dbus() {
    mkdir -p /run/dbus
    # The distribution's policy, plus one rule: the denied user may not talk to org.bluez.
    cat >/run/lab/dbus-system.conf <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <include>/usr/share/dbus-1/system.conf</include>
  <policy user="$LAB_DENIED_USER">
    <deny send_destination="org.bluez"/>
    <deny receive_sender="org.bluez"/>
  </policy>
</busconfig>
CONF
    rm -f /run/dbus/pid /run/dbus/system_bus_socket
    dbus-daemon --config-file=/run/lab/dbus-system.conf --fork --print-pid >/run/lab/dbus.pid 2>>"$LAB_HOSTDIR/dbus.log" \
        || lab_log "dbus-daemon failed"
}

# btmon keeps two records: the btsnoop file (for Wireshark / btmon -r) and its live decoding
# in btmon.log. Failures show the tail of the latter: btmon 5.66 crashes when it decodes some
# ATT responses offline (btmon -r), but not live. Both reach the run folder in batches: the
# capture through a FIFO (btmon writes it per packet). Only on request (Lab.set_capture): btmon
# decodes every packet, even with -w alone, and took 30-40 % of each guest's one CPU during a
# transfer, which halved the emulated link's speed (an L2CAP flood 23.9 KiB/s with it, 45.6
# without, the same minute).
lab_start_btmon() {
    lab_alive btmon && return 0
    rm -f /run/lab/btmon.fifo && mkfifo /run/lab/btmon.fifo
    setsid python3 "$LAB_DIR/guest/log_batcher.py" "$LAB_HOSTDIR/btmon.snoop" </run/lab/btmon.fifo >/dev/null 2>&1 &
    lab_bg_batched btmon stdbuf -oL btmon -T -w /run/lab/btmon.fifo
}

lab_start_bluetoothd() {
    local conf=()
    if [ -n "${LAB_BLUETOOTHD_CONF:-}" ]; then conf=(-f "$LAB_BLUETOOTHD_CONF")
    elif [ -f /run/lab/main.conf ]; then conf=(-f /run/lab/main.conf); fi
    echo "==== bluetoothd start $(date +%T)" >>"$LAB_HOSTDIR/bluetoothd.log"
    lab_radio normal
    lab_bg_batched bluetoothd "$BLUETOOTHD" -n -d "${conf[@]}"
    lab_wait 30 dbus-send --system --print-reply --dest=org.bluez / org.freedesktop.DBus.Peer.Ping \
        || { lab_log "bluetoothd did not come up"; return 1; }
}

lab_stop_bluetoothd() { lab_radio quiet; lab_kill bluetoothd; }

# bluetoothd's configuration: "default" (the distribution's main.conf) or "channels1"
# ([GATT] Channels=1: no EATT, so notifications cannot be reordered across ATT bearers).
lab_conf_name() { cat /run/lab/conf.name 2>/dev/null || echo default; }
lab_use_conf() {
    [ "$(lab_conf_name)" = "$1" ] && lab_alive bluetoothd && return 0
    case "$1" in
        default) rm -f /run/lab/main.conf ;;
        channels1) printf '[GATT]\nChannels=1\n' >/run/lab/main.conf ;;
        *) lab_log "unknown bluetoothd configuration $1"; return 1 ;;
    esac
    echo "$1" >/run/lab/conf.name
    lab_restart_bluetoothd
}

lab_restart_bluetoothd() { lab_stop_bluetoothd; lab_start_bluetoothd; }

# ---- controllers -------------------------------------------------------------------------
# Guest a runs BlueZ's controller emulator (btvirt -s: one emulated controller per connection
# to its server socket, all sharing one "air") and the lab's radio (guest/hci_radio.py), the one
# process every HCI packet of both hosts passes: guest a's controller through a pty, guest b's
# over the virtio-serial port "lab.peer" (a QEMU chardev socket between the two QEMUs; guest b
# sees it as /dev/hvc0). The radio times the link as the profile LAB_LINK says (radio_model.py;
# `lab.sh links` lists them) and takes commands on its control socket (lab_radio_ctl).
LAB_RADIO_SOCK=/run/lab/radio.sock
lab_port() { local p; for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = "$1" ] && { echo "/dev/$(basename "$p")"; return 0; }; done; return 1; }

# btmgmt gives up when its stdin is at EOF (as under the agent), so state comes from hciconfig.
lab_hci_up() { hciconfig hci0 2>/dev/null | grep -q 'UP RUNNING'; }
lab_hci_present() { [ -e /sys/class/bluetooth/hci0 ]; }

# One command to the radio (guest a); prints its answer, fails unless it starts with "ok" (or
# is the JSON of `status`).
lab_radio_ctl() {
    local reply
    reply=$(printf '%s\n' "$*" | socat -t10 - "UNIX-CONNECT:$LAB_RADIO_SOCK" 2>&1) || { lab_log "radio: $reply"; return 1; }
    echo "$reply"
    case "$reply" in ok*|"{"*) return 0 ;; *) lab_log "radio: $* -> $reply"; return 1 ;; esac
}

lab_emulator_start() {  # guest a: the emulator, then the radio in front of it
    if ! lab_alive btvirt; then
        lab_kill radio
        rm -f /tmp/bt-server-*
        lab_bg btvirt btvirt -s
        lab_wait 10 test -S /tmp/bt-server-bredrle || { lab_log "btvirt did not create its socket"; return 1; }
    fi
    lab_alive radio && return 0
    rm -f "$LAB_RADIO_SOCK"
    lab_bg radio python3 "$LAB_DIR/guest/hci_radio.py" --control "$LAB_RADIO_SOCK" \
        --pty-link /run/lab/ttyBT --profile "${LAB_LINK:-linux-default}"
    # Python starts slowly in a guest on a loaded machine.
    lab_wait 30 test -S "$LAB_RADIO_SOCK" || { lab_log "the radio did not start"; return 1; }
}

lab_link_up() {  # guest a: bridge guest b's controller into the emulator
    local port; port="$(lab_port lab.peer)" || { lab_log "no lab.peer port"; return 1; }
    lab_emulator_start || return 1
    # b's kernel resets its controller as soon as it is attached and gives up after 2 s without
    # an answer: `attach` returns once the radio holds b's emulator connection.
    lab_radio_ctl attach b "$port" >/dev/null
}

# Radio cut / restore between the two hosts (run on guest a): both sides see their connections
# end with "Connection Timeout" (under a timed profile, once the link's supervision timeout
# passed without a packet heard) and no advertisements until the restore; controllers stay
# powered. lab_unplug_bridge is the harsher variant (b's controller leaves the emulator; b must
# be power-cycled after lab_link_up).
lab_link_down() { lab_radio_ctl cut >/dev/null; }
lab_link_restore() { lab_radio_ctl restore >/dev/null; }
lab_unplug_bridge() { lab_radio_ctl detach b >/dev/null; }

# The radio's profile from now on (new links; the controllers' buffers and features reach a
# host at its next power-on: lab.py's use_link power-cycles both).
lab_link_profile() { lab_radio_ctl profile "$1" >/dev/null; }
lab_link_status() { lab_radio_ctl status; }

lab_controller_attach() {  # attach this guest's controller (hci0)
    if [ "$LAB_HOST" = a ]; then
        lab_emulator_start || return 1
        lab_radio_ctl attach a >/dev/null || return 1
        lab_wait 10 test -e /run/lab/ttyBT || { lab_log "no pty for the controller"; return 1; }
        lab_alive btattach || lab_bg btattach btattach -B /run/lab/ttyBT -P h4
    else
        lab_alive btattach || lab_bg btattach btattach -B /dev/hvc0 -P h4
    fi
    lab_wait 20 lab_hci_present || { lab_log "hci0 did not appear"; return 1; }
}

lab_controller_detach() {  # the controller disappears (unplugged)
    lab_kill btattach
    [ "$LAB_HOST" = a ] && lab_alive radio && lab_radio_ctl detach a >/dev/null
    lab_wait 10 eval '! lab_hci_present'
}

lab_power() {  # on|off, through bluetoothd like a user would
    local how; [ "$1" = on ] && how=up || how=down
    [ "$1" = off ] && lab_radio quiet
    timeout 15 bluetoothctl power "$1" >/dev/null 2>&1 || hciconfig hci0 "$how"
    [ "$1" = on ] && lab_radio normal
    if [ "$1" = on ]; then lab_wait 20 lab_hci_up; else lab_wait 20 eval '! lab_hci_up'; fi
}

# A controller whose host powers it off must stop advertising; the emulator may not (see
# hci_radio.py, "Quiet radio"). Guest a's controller is the one that matters: b's is not
# advertising in any scenario that powers it off.
lab_radio() {  # quiet | normal
    [ "$LAB_HOST" = a ] && lab_alive radio || return 0
    lab_radio_ctl "$1" a >/dev/null
}

lab_address() { hciconfig hci0 2>/dev/null | awk '/BD Address/ {print $3; exit}'; }

lab_stop_all() {
    local n
    for n in bluetoothd btattach radio btvirt btmon; do lab_kill "$n"; done
}

# Run a command as the user the D-Bus policy denies (state `unauthorized`).
lab_as_denied_user() { setpriv --reuid="$LAB_DENIED_USER" --regid=nogroup --clear-groups -- "$@"; }

# The python that has bleak + bless (chosen by `lab.sh setup`).
lab_python() { "$(cat "$LAB_PYTHON_PATH_FILE")" "$@"; }

# Back to the baseline every scenario starts from: bluetoothd running, link up, adapter on.
lab_baseline() {  # $1 = bluetoothd configuration (default, channels1)
    lab_use_conf "${1:-default}" || return 1
    lab_alive bluetoothd || lab_start_bluetoothd || return 1
    if [ "$LAB_HOST" = a ]; then
        lab_emulator_start && lab_link_up || return 1
        # A run can end before its "restore" fault fires (the transfer finished first): every
        # scenario starts with the radio up and guest a's controller not held quiet.
        lab_link_restore && lab_radio normal || return 1
    fi
    case " ${LAB_NO_CONTROLLER:-} " in *" $LAB_HOST "*) return 0 ;; esac
    lab_hci_present || lab_controller_attach || return 1
    lab_hci_up || lab_power on || return 1
    lab_forget_devices
}

# btmgmt quits as soon as its stdin reaches EOF, before the controller answers: keep stdin open.
lab_btmgmt() { timeout 15 btmgmt --index 0 "$@" < <(sleep 15); }

# Raw link capacity: LE credit-based L2CAP (PSM 0x80) from this host to the peer, with l2test.
# The receiver must be connectable and advertising: lab_l2test_receiver on it first.
# LAB_L2TEST_MTU: bytes per SDU (default 512); above the channel's default MTU of 672 both
# sides set their MTU to it (-I/-O) so that one SDU is one write. LAB_L2TEST_RECEIVE_MTU: the
# receiver's MTU when it should be larger: Linux 6.1 grants a channel MTU ÷ MPS + 1 credits, so
# with the receiver's MTU equal to the SDU the sender runs out of credits at the end of every SDU
# and waits a connection event or two for the next ones (about 5 % of a 50 ms link with 8 KiB
# SDUs); a receive MTU of many SDUs keeps it sending.
lab_l2test_mtu_options() {
    local mtu=${LAB_L2TEST_MTU:-512}
    [ "$1" = receiver ] && [ -n "${LAB_L2TEST_RECEIVE_MTU:-}" ] && { echo "-I $LAB_L2TEST_RECEIVE_MTU -O $mtu"; return; }
    [ "$mtu" -gt 672 ] && echo "-I $mtu -O $mtu"
}
lab_l2test_receiver() {  # $1 = seconds to listen at most, $2 = bytes expected (optional)
    lab_btmgmt connectable on >/dev/null && lab_btmgmt advertising on >/dev/null || return 1
    local out pid waited=0 got line lines
    out=$(mktemp /tmp/l2test-receiver.XXXXXX)
    # shellcheck disable=SC2046  # the options are words on purpose
    l2test -r -V le_public -P 0x0080 -b "${LAB_L2TEST_MTU:-512}" $(lab_l2test_mtu_options receiver) >"$out" 2>&1 &
    pid=$!
    echo "L2TEST-LISTENING"
    # l2test -r serves connection after connection: stop it once the first one ended or the
    # expected bytes are in. (A background job ignores SIGINT: it is stopped with TERM.) The
    # wait forks nothing: a grep, an awk and a sleep every 0.2 s took a quarter of this guest's
    # one CPU under TCG during the flood it measures.
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$(( ${1:-60} * 4 ))" ]; do
        mapfile -t lines <"$out"
        got=0
        for line in "${lines[@]}"; do
            [[ $line == *Disconnect* ]] && break 2
            [[ $line =~ ([0-9]+)\ bytes\ in ]] && got=$((got + BASH_REMATCH[1]))
        done
        [ -n "${2:-}" ] && [ "$got" -ge "$2" ] && break
        lab_pause 0.25; waited=$((waited + 1))
    done
    kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    cat "$out"; rm -f "$out"
    # The legacy advertising setting left on would make this host's own L2CAP connections
    # (bletransfer receive opening a sender's channel) fail with EBUSY.
    lab_btmgmt advertising off >/dev/null
    return 0
}
# $3: milliseconds to keep the channel open after the last write. l2test returns once its
# frames are queued in the kernel, and on a slow link what is still queued when it closes may
# never go out (the far profile lost the last 8 KiB SDU of four this way); the receiver ends
# the run as soon as it has every byte, so a generous bound costs nothing.
lab_l2test_sender() {  # $1 = peer address, $2 = frames, $3 = linger ms (default 0)
    # shellcheck disable=SC2046
    l2test -s -V le_public -P 0x0080 -b "${LAB_L2TEST_MTU:-512}" $(lab_l2test_mtu_options sender) \
        -g "${3:-0}" -N "${2:-400}" "$1"
}

# The binary under test runs from the guest's memory, as an installed one runs from a local
# disk. Read over 9p (the guests' root is the host's), a 100 MB static build took up to 1.5 s
# longer to start under TCG, and every figure timed from a process's launch counted it. Copied
# once per build and boot (LAB_BIN_KEY, set by the host, names the build); an older copy goes.
lab_local_binary() {
    local dir="/run/lab/bin" dst
    dst="$dir/$LAB_BIN_KEY/bletransfer"
    if [ ! -x "$dst" ]; then
        mkdir -p "$dir/$LAB_BIN_KEY" || return 0
        cp "$BLETRANSFER_BIN" "$dst.$$" 2>/dev/null && mv -f "$dst.$$" "$dst" || { rm -f "$dst.$$"; return 0; }
        find "$dir" -mindepth 1 -maxdepth 1 ! -name "$LAB_BIN_KEY" -exec rm -rf {} + 2>/dev/null
    fi
    BLETRANSFER_BIN="$dst"
    export BLETRANSFER_BIN
}
if [ -n "${BLETRANSFER_BIN:-}" ] && [ -n "${LAB_BIN_KEY:-}" ]; then lab_local_binary; fi
