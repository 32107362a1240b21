# Helpers for real hosts (hw.py): the same names the scenarios use in the virtual lab, done
# with the host's own bluetoothd and adapter. Privileged steps use `sudo -n` (configure
# passwordless sudo for these commands, or run as root).
# shellcheck source=scripts/lab/common_lib.sh
. "$LAB_DIR/common_lib.sh"  # lab_forget_devices
LAB_HOSTDIR="$LAB_OUT/$LAB_HOST"
mkdir -p "$LAB_HOSTDIR"
lab_log() { echo "[$LAB_HOST $(date +%T)] $*"; }
lab_sudo() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }
lab_wait() {
    local t="$1"; shift
    local end=$(( $(date +%s) + ${t%.*} ))
    until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt $end ] || return 1; sleep 0.2; done
}
lab_hci() { echo "${LAB_HCI:-hci0}"; }
lab_hci_present() { [ -e "/sys/class/bluetooth/$(lab_hci)" ]; }
lab_hci_up() { bluetoothctl show 2>/dev/null | grep -q 'Powered: yes'; }
lab_address() { bluetoothctl show 2>/dev/null | awk '/^Controller/ {print $2; exit}'; }
lab_power() {
    timeout 15 bluetoothctl power "$1" >/dev/null
    if [ "$1" = on ]; then lab_wait 20 lab_hci_up; else lab_wait 20 eval '! lab_hci_up'; fi
}
lab_btmgmt() { lab_sudo timeout 15 btmgmt --index "${LAB_HCI#hci}" "$@" < <(sleep 15); }
lab_alive() { [ "$1" = bluetoothd ] && systemctl is-active --quiet bluetooth; }
lab_start_bluetoothd() { lab_sudo systemctl start bluetooth && lab_wait 20 lab_hci_present; }
lab_stop_bluetoothd() { lab_sudo systemctl stop bluetooth; }
lab_restart_bluetoothd() { lab_sudo systemctl restart bluetooth && lab_wait 20 eval 'bluetoothctl show >/dev/null'; }
lab_controller_detach() { lab_log "detach-controller is only available in the virtual lab"; return 2; }
lab_controller_attach() { lab_log "attach-controller is only available in the virtual lab"; return 2; }
lab_use_conf() { [ "${1:-default}" = default ] || lab_log "note: bluetoothd configuration '$1' is not applied on real hosts"; }
lab_baseline() {
    lab_use_conf "${1:-default}"
    lab_alive bluetoothd || lab_start_bluetoothd || return 1
    lab_hci_present || { lab_log "no adapter $(lab_hci)"; return 1; }
    lab_hci_up || lab_power on || return 1
    lab_forget_devices
}
lab_l2test_receiver() {
    lab_btmgmt connectable on >/dev/null && lab_btmgmt advertising on >/dev/null || return 1
    echo "L2TEST-LISTENING"
    timeout -s INT "${1:-60}" l2test -r -V le_public -P 0x0080 -b "${LAB_L2TEST_MTU:-512}"
    lab_btmgmt advertising off >/dev/null
    return 0
}
lab_l2test_sender() { l2test -s -V le_public -P 0x0080 -b "${LAB_L2TEST_MTU:-512}" -N "${2:-400}" "$1"; }
