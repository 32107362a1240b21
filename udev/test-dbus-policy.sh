#!/usr/bin/env bash
# Checks udev/bletransfer-dbus.conf on a real dbus-daemon: a private bus configured like
# Debian 12's system bus (system.conf's defaults and bluetooth.conf's rules, which let every
# user call org.bluez), with our policy file included for the user "nobody" in place of
# "bletransfer". BlueZoo (the org.bluez mock) owns org.bluez as root. As "nobody":
# the calls bletransfer makes get through, anything else in org.bluez is AccessDenied.
#
#   udev/test-dbus-policy.sh        (as root; needs dbus-daemon, dbus-send, bluezoo, runuser)
#
# Ends with "dbus-policy: N passed, M failed"; exit status 1 when a check failed, 77 when a
# tool is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
for tool in dbus-daemon dbus-send bluezoo runuser; do
  command -v "$tool" >/dev/null || { echo "dbus-policy: $tool not found; skipped"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "dbus-policy: run as root (the test switches to user nobody)"; exit 77; }

work=$(mktemp -d /tmp/bletransfer-dbus-policy.XXXXXX)
chmod 0755 "$work"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

sed 's/<policy user="bletransfer">/<policy user="nobody">/' "$repo/udev/bletransfer-dbus.conf" > "$work/bletransfer.conf"
cat > "$work/bus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=$work/bus</listen>
  <auth>EXTERNAL</auth>
  <!-- /usr/share/dbus-1/system.conf's defaults -->
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
  </policy>
  <!-- Debian 12's /etc/dbus-1/system.d/bluetooth.conf, in short -->
  <policy user="root">
    <allow own="org.bluez"/>
    <allow send_destination="org.bluez"/>
    <allow send_destination="*"/>
  </policy>
  <policy group="bluetooth">
    <allow send_destination="org.bluez"/>
  </policy>
  <policy context="default">
    <allow send_destination="org.bluez"/>
  </policy>
  <include>$work/bletransfer.conf</include>
</busconfig>
CONF
dbus-daemon --config-file="$work/bus.conf" --nofork --print-address > "$work/address" 2>"$work/dbus.log" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/address" ] && break; sleep 0.1; done
address=$(head -n 1 "$work/address")
[ -n "$address" ] || { echo "dbus-policy: dbus-daemon did not start"; cat "$work/dbus.log"; exit 1; }
chmod 0666 "$work/bus"
DBUS_SYSTEM_BUS_ADDRESS="$address" bluezoo --auto-enable -a 00:11:22:33:44:55 > "$work/bluezoo.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  dbus-send --bus="$address" --print-reply --dest=org.bluez / org.freedesktop.DBus.ObjectManager.GetManagedObjects 2>/dev/null | grep -q hci0 && break
  sleep 0.1
done

passed=0; failed=0
# call EXPECT DESCRIPTION dbus-send-arguments…: EXPECT is "allowed" (anything but AccessDenied)
# or "denied" (AccessDenied), for a call made as user nobody.
call() {
  local expect="$1" what="$2"; shift 2
  local output
  output=$(runuser -u nobody -- dbus-send --bus="$address" --print-reply --dest=org.bluez "$@" 2>&1)
  local denied=no
  grep -q "org.freedesktop.DBus.Error.AccessDenied" <<<"$output" && denied=yes
  if { [ "$expect" = allowed ] && [ "$denied" = no ]; } || { [ "$expect" = denied ] && [ "$denied" = yes ]; }; then
    echo "ok   $what"; passed=$((passed + 1))
  else
    echo "FAIL $what: ${output:0:200}"; failed=$((failed + 1))
  fi
}
call allowed "GetManagedObjects" / org.freedesktop.DBus.ObjectManager.GetManagedObjects
call allowed "Properties.GetAll" /org/bluez/hci0 org.freedesktop.DBus.Properties.GetAll string:org.bluez.Adapter1
call allowed "Adapter1.StartDiscovery" /org/bluez/hci0 org.bluez.Adapter1.StartDiscovery
call allowed "Adapter1.StopDiscovery" /org/bluez/hci0 org.bluez.Adapter1.StopDiscovery
call allowed "Adapter1.SetDiscoveryFilter" /org/bluez/hci0 org.bluez.Adapter1.SetDiscoveryFilter 'dict:string:variant:Transport,string:le'
call allowed "LEAdvertisingManager1.UnregisterAdvertisement" /org/bluez/hci0 org.bluez.LEAdvertisingManager1.UnregisterAdvertisement objpath:/x
call allowed "GattManager1.UnregisterApplication" /org/bluez/hci0 org.bluez.GattManager1.UnregisterApplication objpath:/x
call denied "Properties.Set (power, alias, discoverable...)" /org/bluez/hci0 org.freedesktop.DBus.Properties.Set string:org.bluez.Adapter1 string:Alias variant:string:x
call denied "AgentManager1.RegisterAgent (pairing)" /org/bluez org.bluez.AgentManager1.RegisterAgent objpath:/agent string:NoInputNoOutput
call denied "Adapter1.RemoveDevice is allowed but Device1.Pair is not" /org/bluez/hci0/dev_00_00_00_00_00_01 org.bluez.Device1.Pair
call denied "ProfileManager1.RegisterProfile" /org/bluez org.bluez.ProfileManager1.RegisterProfile objpath:/p string:0000110a-0000-1000-8000-00805f9b34fb dict:string:string:
# Root (bluetoothd's side, other tools) is unaffected.
if dbus-send --bus="$address" --print-reply --dest=org.bluez /org/bluez/hci0 org.freedesktop.DBus.Properties.Set \
     string:org.bluez.Adapter1 string:Alias variant:string:lab 2>&1 | grep -q AccessDenied; then
  echo "FAIL root is refused too"; failed=$((failed + 1))
else
  echo "ok   root is unaffected"; passed=$((passed + 1))
fi
echo "dbus-policy: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
