# Helpers that are the same in the virtual lab's guests and on real hosts: sourced by
# guest/lib.sh and by hw_lib.sh (hw.py copies this file to the hosts beside hw_lib.sh).

# Remove every device bluetoothd knows. A known device keeps the UUIDs of its resolved GATT
# services, not those it advertises now, so a central that filters on Device1.UUIDs would not
# find a peer that it (or that found it) met before in another role; scenarios start clean.
lab_forget_devices() {
    local d
    for d in $(timeout 10 bluetoothctl devices 2>/dev/null | awk '/^Device/ {print $2}'); do
        timeout 10 bluetoothctl remove "$d" >/dev/null 2>&1
    done
    return 0
}

# Waits that fork nothing. Under TCG a fork and exec cost a guest's one CPU milliseconds each,
# and the lab's polls (a find | wc and a sleep every tenth of a second) took a fifth of it from
# the transfers they were timing. lab_pause is a read with a timeout on a FIFO nobody writes
# (made by the virtual lab's agent at boot; on a real host it sleeps); lab_count_files counts
# with a glob.
lab_pause() {  # $1 = seconds
    local fd
    if [ -p /run/lab/pause.fifo ] && exec {fd}<>/run/lab/pause.fifo; then
        read -rt "$1" -u "$fd"
        exec {fd}>&-
    else
        sleep "$1"
    fi
    return 0
}
lab_count_files() {  # $1 = directory, $2 = glob (default *): visible regular files directly in it
    local f n=0
    for f in "$1"/${2:-*}; do
        [ -f "$f" ] && [ ! -L "$f" ] && n=$((n + 1))
    done
    echo "$n"
}
