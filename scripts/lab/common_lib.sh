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
