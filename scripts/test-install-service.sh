#!/usr/bin/env bash
# Tests scripts/install-service.sh in throwaway roots (--root), so nothing on this machine
# changes, and checks the installed units with systemd-analyze and the udev rule's matches,
# the service's identity and authorized-peers file, and that the installed daemon refuses to
# start without an authorized peer and starts once one is listed.
#
#   scripts/test-install-service.sh [--binary PATH]
#       (default: .build/debug/bletransfer, else .build/release/bletransfer, else the
#       package's static build .build-deb/release/bletransfer)
#
# Ends with "install-service: N passed, M failed"; exits non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
installer="$repo/scripts/install-service.sh"

binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    *) echo "test-install-service: unknown option '$1'" >&2; exit 64 ;;
  esac
done

passed=0 failed=0
check() { # description command…
  local description="$1"; shift
  if "$@" >/dev/null 2>&1; then
    passed=$((passed + 1)); echo "ok   $description"
  else
    failed=$((failed + 1)); echo "FAIL $description"
  fi
}
file_has() { grep -q -- "$2" "$1"; }
file_lacks() { ! grep -q -- "$2" "$1"; }
mode_is() { [ "$(stat -c %a "$1")" = "$2" ]; }
owner_is() { [ "$(stat -c %u:%g "$1")" = "$2" ]; }

if [ "$(id -u)" -ne 0 ]; then
  echo "test-install-service: needs root (useradd --root chroots); skipped"
  echo "install-service: 0 passed, 0 failed"
  exit 0
fi

work=$(mktemp -d /tmp/bletransfer-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
# A real build: the installer runs `bletransfer keygen` and `id`, and the checks run the daemon.
if [ -z "$binary" ]; then
  for candidate in "$repo/.build/debug/bletransfer" "$repo/.build/release/bletransfer" "$repo/.build-deb/release/bletransfer"; do
    [ -x "$candidate" ] && { binary=$candidate; break; }
  done
fi
if [ -z "$binary" ] || [ ! -x "$binary" ]; then
  echo "test-install-service: no bletransfer binary (swift build, or --binary PATH)"
  echo "install-service: 0 passed, 1 failed"
  exit 1
fi
# The daemon checks run as the service user, who must be able to reach the trees in here.
chmod 0755 "$work"

# A root with just enough of /etc for useradd, and the distribution's units for
# systemd-analyze verify (it resolves sysinit.target, basic.target… inside the root).
new_root() {
  local dir="$work/$1"
  mkdir -p "$dir/etc" "$dir/usr/lib/systemd"
  printf 'root:x:0:0:root:/root:/bin/bash\n' > "$dir/etc/passwd"
  printf 'root:x:0:\n' > "$dir/etc/group"
  printf 'root:*:19000:0:99999:7:::\n' > "$dir/etc/shadow"
  printf 'root:*::\n' > "$dir/etc/gshadow"
  chmod 0640 "$dir/etc/shadow" "$dir/etc/gshadow"
  if [ -d /usr/lib/systemd/system ]; then cp -a /usr/lib/systemd/system "$dir/usr/lib/systemd/"; fi
  echo "$dir"
}

verify_units() { # root prefix
  command -v systemd-analyze >/dev/null || return 0
  local output
  output=$(systemd-analyze verify --root="$1" bletransfer-receiver@hci0.service bletransfer-sender@hci1.service 2>&1) || { echo "$output" >&2; return 1; }
  # verify exits 0 on some complaints (unknown keys, bad values): any output is a failure.
  [ -z "$output" ] || { echo "$output" >&2; return 1; }
}

host_user=$(getent passwd bletransfer || true)
host_rule=$(ls /etc/udev/rules.d/70-bletransfer.rules 2>/dev/null || true)

echo "=== receiver install into a throwaway root"
r1=$(new_root r1)
check "install --role receiver succeeds" bash -c 'bash "$1" --root "$2" --role receiver --binary "$3" > "$4" 2>&1' _ "$installer" "$r1" "$binary" "$work/r1-install.log"
check "binary installed executable" test -x "$r1/usr/local/bin/bletransfer"
check "binary is the given one" cmp "$binary" "$r1/usr/local/bin/bletransfer"
check "receiver unit installed" test -f "$r1/etc/systemd/system/bletransfer-receiver@.service"
check "sender unit installed" test -f "$r1/etc/systemd/system/bletransfer-sender@.service"
check "udev rule installed as it is (both roles' units; the configuration picks one)" cmp "$repo/udev/70-bletransfer.rules" "$r1/etc/udev/rules.d/70-bletransfer.rules"
check "env file created from the package's" file_has "$r1/etc/default/bletransfer" '^BLETRANSFER_RECEIVER_OPTIONS='
check "env file chooses the role in one line (BLETRANSFER_ROLE=receiver)" bash -c '[ "$(grep -c "^BLETRANSFER_ROLE=" "$1")" = 1 ] && grep -qx "BLETRANSFER_ROLE=receiver" "$1"' _ "$r1/etc/default/bletransfer"
check "configuration check installed" test -x "$r1/usr/local/libexec/bletransfer/check-configuration"
check "units run the check first (ExecCondition=)" bash -c 'grep -qx "ExecCondition=/usr/local/libexec/bletransfer/check-configuration receiver" "$1/etc/systemd/system/bletransfer-receiver@.service" && grep -qx "ExecCondition=/usr/local/libexec/bletransfer/check-configuration sender" "$1/etc/systemd/system/bletransfer-sender@.service"' _ "$r1"
check "units start /usr/local/bin/bletransfer" file_has "$r1/etc/systemd/system/bletransfer-receiver@.service" '^ExecStart=/usr/local/bin/bletransfer daemon --role receiver '
check "documentation installed" test -f "$r1/usr/local/share/doc/bletransfer/unattended.md"
check "system user created" grep -q '^bletransfer:x:[0-9]*:[0-9]*:bletransfer daemon:/var/lib/bletransfer:/usr/sbin/nologin$' "$r1/etc/passwd"
check "user is a system user (uid < 1000)" awk -F: '$1 == "bletransfer" { exit !($3 < 1000) }' "$r1/etc/passwd"
check "user is not in group bluetooth (the policy file grants its D-Bus rights)" bash -c "! grep -Eq '^bluetooth:.*[:,]bletransfer(,|\$)' '$r1/etc/group'"
check "D-Bus policy installed" cmp "$repo/udev/bletransfer-dbus.conf" "$r1/etc/dbus-1/system.d/bletransfer.conf"
check "D-Bus policy is for the service user only" file_has "$r1/etc/dbus-1/system.d/bletransfer.conf" '<policy user="bletransfer">'
check "D-Bus policy allows nothing wholesale" bash -c "! grep -E '<allow send_destination=\"org.bluez\"/>' '$r1/etc/dbus-1/system.d/bletransfer.conf'"
if command -v xmllint >/dev/null; then
  check "D-Bus policy is well-formed XML" xmllint --noout "$repo/udev/bletransfer-dbus.conf"
fi
check "group bletransfer exists" grep -q '^bletransfer:x:' "$r1/etc/group"
uid=$(awk -F: '$1 == "bletransfer" {print $3}' "$r1/etc/passwd")
gid=$(awk -F: '$1 == "bletransfer" {print $3}' "$r1/etc/group")
check "inbox created 0750 for the user" mode_is "$r1/var/lib/bletransfer/inbox" 750
check "inbox owned by the user" owner_is "$r1/var/lib/bletransfer/inbox" "$uid:$gid"
check "host user database untouched" test "$host_user" = "$(getent passwd bletransfer || true)"
identity="$r1/var/lib/bletransfer/identity"
peers="$r1/etc/bletransfer/authorized-peers"
check "service identity created 0600" mode_is "$identity" 600
check "service identity owned by the user" owner_is "$identity" "$uid:$gid"
check "service identity is a bletransfer private key" grep -q '^bletransfer-x25519-private ' "$identity"
public_key=$("$binary" id --identity "$identity" 2>/dev/null | head -n 1)
check "the installer printed the service's public key line" grep -qxF "install-service: the service's public key: $public_key" "$work/r1-install.log"
check "the installer printed the next step" grep -q "^install-service: next: add the peer's public key line .* $peers" "$work/r1-install.log"
check "authorized-peers created 0644 in /etc/bletransfer" mode_is "$peers" 644
check "authorized-peers holds comments only" bash -c "! grep -v '^#' '$peers' | grep -q '[^[:space:]]'"
check "authorized-peers says what to put there" file_has "$peers" 'bletransfer-x25519 <base64'
check "host rules untouched" test "$host_rule" = "$(ls /etc/udev/rules.d/70-bletransfer.rules 2>/dev/null || true)"
check "systemd-analyze verify: both units clean" verify_units "$r1"
if command -v systemd-analyze >/dev/null; then
  exposure=$(systemd-analyze security --offline=true --root="$r1" bletransfer-receiver@hci0.service 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  echo "     systemd-analyze security exposure (0 best, 10 worst): ${exposure:-?}"
  check "hardening exposure below 2.0" awk -v e="${exposure:-10}" 'BEGIN { exit !(e < 2.0) }'
fi

echo "=== the installed daemon and the authorized peers"
# As the service user, with the installed files; at most 8 s (a daemon that started keeps
# waiting for Bluetooth, which this machine may not have, until timeout's SIGTERM: status 124).
run_daemon() { # root → stderr in $work/daemon.err, status in $work/daemon.rc
  setpriv --reuid="$uid" --regid="$gid" --clear-groups -- timeout -s TERM 8 \
    "$1/usr/local/bin/bletransfer" daemon --role receiver --adapter hci0 --output-dir "$1/var/lib/bletransfer/inbox" \
    --identity "$1/var/lib/bletransfer/identity" --authorized-peers "$1/etc/bletransfer/authorized-peers" \
    >/dev/null 2>"$work/daemon.err" </dev/null
  echo $? > "$work/daemon.rc"
}
# The units' ExecCondition= as systemd runs it: as the service user, with the variables of
# the env file (and the tree's authorized-peers file in place of /etc's). Prints
# "STATUS LINES FIRST-LINE".
condition() { # root role
  local err status
  err=$(setpriv --reuid="$uid" --regid="$gid" --clear-groups -- env -i PATH=/usr/bin:/bin sh -c \
    'set -a; . "$1/etc/default/bletransfer"; BLETRANSFER_OPTIONS="$BLETRANSFER_OPTIONS --authorized-peers $1/etc/bletransfer/authorized-peers"; set +a
     exec "$1/usr/local/libexec/bletransfer/check-configuration" "$2"' _ "$1" "$2" 2>&1 >/dev/null)
  status=$?
  echo "$status $(printf '%s' "$err" | grep -c .) $(printf '%s' "$err" | head -n 1)"
}
result=$(condition "$r1" receiver)
echo "     receiver's condition without peers: $result"
check "without an authorized peer the receiver unit is skipped (1) with one line naming the file" bash -c '[[ "$1" == "1 1 not started: "*"/etc/bletransfer/authorized-peers lists no peer;"* ]]' _ "$result"
run_daemon "$r1"
sed 's/^/     daemon without peers: /' "$work/daemon.err" | head -n 3
check "without an authorized peer the daemon refuses to start (exit 78)" test "$(cat "$work/daemon.rc")" = 78
check "... with one line naming the authorized-peers file" bash -c '[ "$(wc -l < "$1")" -eq 1 ] && grep -q "authorized-peers" "$1"' _ "$work/daemon.err"
peer_identity="$work/peer-identity"
"$binary" keygen --identity "$peer_identity" --name peer@test >/dev/null 2>&1
"$binary" id --identity "$peer_identity" 2>/dev/null | head -n 1 >> "$peers"
check "with the peer's key listed the receiver's condition passes (0, silent)" test "$(condition "$r1" receiver)" = "0 0 "
result=$(condition "$r1" sender)
check "the sender unit is skipped on a receiver host, one line" bash -c '[[ "$1" == "1 1 not started: this host'"'"'s role is receiver"* ]]' _ "$result"
run_daemon "$r1"
sed 's/^/     daemon with a peer: /' "$work/daemon.err" | head -n 3
check "with the peer's key listed the daemon starts and keeps running (until timeout's SIGTERM)" test "$(cat "$work/daemon.rc")" = 124

echo "=== running it again changes nothing and keeps local edits"
echo 'BLETRANSFER_OPTIONS=--verbose' >> "$r1/etc/default/bletransfer"
identity_before=$(md5sum < "$identity")
peers_before=$(md5sum < "$peers")
passwd_before=$(md5sum < "$r1/etc/passwd")
group_before=$(md5sum < "$r1/etc/group")
check "second install succeeds" bash "$installer" --root "$r1" --role receiver --binary "$binary"
check "passwd unchanged" test "$passwd_before" = "$(md5sum < "$r1/etc/passwd")"
check "group unchanged" test "$group_before" = "$(md5sum < "$r1/etc/group")"
check "env file edits kept" file_has "$r1/etc/default/bletransfer" '^BLETRANSFER_OPTIONS=--verbose$'
check "identity kept" test "$identity_before" = "$(md5sum < "$identity")"
check "authorized peers kept" test "$peers_before" = "$(md5sum < "$peers")"
check "no temporary files left" bash -c "! find '$r1' -name '.*.new' | grep -q ."

echo "=== switching to the sender role"
check "install --role sender succeeds" bash "$installer" --root "$r1" --role sender --binary "$binary"
check "env file now chooses the sender, one role line" bash -c '[ "$(grep -c "^BLETRANSFER_ROLE=" "$1")" = 1 ] && grep -qx "BLETRANSFER_ROLE=sender" "$1"' _ "$r1/etc/default/bletransfer"
check "env file's other edits kept" file_has "$r1/etc/default/bletransfer" '^BLETRANSFER_OPTIONS=--verbose$'
check "udev rule unchanged" cmp "$repo/udev/70-bletransfer.rules" "$r1/etc/udev/rules.d/70-bletransfer.rules"
check "the sender's condition passes, the receiver is skipped" bash -c '[ "$1" = "0 0 " ] && [[ "$2" == "1 1 not started: this host'"'"'s role is sender"* ]]' _ "$(condition "$r1" sender)" "$(condition "$r1" receiver)"
check "outbox created setgid 2770" mode_is "$r1/var/lib/bletransfer/outbox" 2770
check "outbox owned by the user" owner_is "$r1/var/lib/bletransfer/outbox" "$uid:$gid"

echo "=== upgrading an install whose user was in group bluetooth"
r3=$(new_root r3)
printf 'bluetooth:x:990:\nbletransfer:x:991:\n' >> "$r3/etc/group"
printf 'bluetooth:!::\nbletransfer:!::\n' >> "$r3/etc/gshadow"
printf 'bletransfer:x:991:991:bletransfer daemon:/var/lib/bletransfer:/usr/sbin/nologin\n' >> "$r3/etc/passwd"
printf 'bletransfer:!:19000::::::\n' >> "$r3/etc/shadow"
sed -i 's/^bluetooth:x:990:$/bluetooth:x:990:bletransfer/' "$r3/etc/group"
sed -i 's/^bluetooth:!::$/bluetooth:!::bletransfer/' "$r3/etc/gshadow"
# An env file and a rule from before the role line (the rule then named the role).
mkdir -p "$r3/etc/default" "$r3/etc/udev/rules.d"
printf 'BLETRANSFER_OPTIONS=--verbose\n' > "$r3/etc/default/bletransfer"
sed 's/bletransfer-receiver@%k.service bletransfer-sender@%k.service/bletransfer-sender@%k.service/' "$repo/udev/70-bletransfer.rules" > "$r3/etc/udev/rules.d/70-bletransfer.rules"
check "install over the old setup succeeds" bash "$installer" --root "$r3" --role receiver --binary "$binary"
check "the old env file gets the role line and keeps its own" bash -c 'grep -qx "BLETRANSFER_ROLE=receiver" "$1" && grep -qx "BLETRANSFER_OPTIONS=--verbose" "$1"' _ "$r3/etc/default/bletransfer"
check "the old rule is replaced" cmp "$repo/udev/70-bletransfer.rules" "$r3/etc/udev/rules.d/70-bletransfer.rules"
check "the user left group bluetooth" grep -q '^bluetooth:x:990:$' "$r3/etc/group"
check "the policy file is there instead" test -f "$r3/etc/dbus-1/system.d/bletransfer.conf"

echo "=== another prefix"
r2=$(new_root r2)
check "install --prefix /opt/bletransfer succeeds" bash "$installer" --root "$r2" --prefix /opt/bletransfer --binary "$binary"
check "binary under the prefix" test -x "$r2/opt/bletransfer/bin/bletransfer"
check "units start the binary under the prefix" file_has "$r2/etc/systemd/system/bletransfer-receiver@.service" '^ExecStart=/opt/bletransfer/bin/bletransfer daemon --role receiver --adapter %i --output-dir /var/lib/bletransfer/inbox '
check "units point at the documentation under the prefix" file_has "$r2/etc/systemd/system/bletransfer-sender@.service" '^Documentation=file:/opt/bletransfer/share/doc/bletransfer/unattended.md$'
check "units run the check under the prefix" file_has "$r2/etc/systemd/system/bletransfer-sender@.service" '^ExecCondition=/opt/bletransfer/libexec/bletransfer/check-configuration sender$'
check "no unit names a path outside the prefix" bash -c '! grep -E "/usr/(bin|libexec|share/doc)/bletransfer|/usr/local" "$1"/etc/systemd/system/bletransfer-*.service' _ "$r2"
check "systemd-analyze verify with the prefix" verify_units "$r2"

echo "=== uninstall"
check "uninstall succeeds" bash "$installer" --root "$r1" --uninstall
check "binary removed" test ! -e "$r1/usr/local/bin/bletransfer"
check "configuration check removed" test ! -e "$r1/usr/local/libexec/bletransfer"
check "units removed" test ! -e "$r1/etc/systemd/system/bletransfer-receiver@.service" -a ! -e "$r1/etc/systemd/system/bletransfer-sender@.service"
check "rule removed" test ! -e "$r1/etc/udev/rules.d/70-bletransfer.rules"
check "D-Bus policy removed" test ! -e "$r1/etc/dbus-1/system.d/bletransfer.conf"
check "env file kept" test -f "$r1/etc/default/bletransfer"
check "data kept" test -d "$r1/var/lib/bletransfer/outbox"
check "identity and authorized peers kept" test -f "$identity" -a -f "$peers"
check "user kept" grep -q '^bletransfer:' "$r1/etc/passwd"
check "uninstall twice is fine" bash "$installer" --root "$r1" --uninstall

echo "=== bad input gets a one-line error and status 64/66"
status_and_one_line() { # expected-status args…
  local expected="$1"; shift
  local output status
  output=$(bash "$installer" "$@" 2>&1 >/dev/null); status=$?
  [ "$status" -eq "$expected" ] && [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] && [[ "$output" == install-service:* ]]
}
check "unknown role" status_and_one_line 64 --root "$r2" --role both --binary "$binary"
check "unknown option" status_and_one_line 64 --root "$r2" --frobnicate
check "relative prefix" status_and_one_line 64 --root "$r2" --prefix usr/local --binary "$binary"
check "missing binary" status_and_one_line 66 --root "$r2" --binary "$work/absent"
check "root that does not exist" status_and_one_line 64 --root "$work/absent"

echo "=== the udev rule matches controllers only"
rule="$repo/udev/70-bletransfer.rules"
# The rule's conditions, spelled out: it must stop for removals, other subsystems,
# connection devices ("link") and names that are not hciN.
check "skips remove events" file_has "$rule" '^ACTION=="remove", GOTO="bletransfer_end"$'
check "skips other subsystems" file_has "$rule" '^SUBSYSTEM!="bluetooth", GOTO="bletransfer_end"$'
check "skips connections (DEVTYPE link)" file_has "$rule" '^ENV{DEVTYPE}!="host", GOTO="bletransfer_end"$'
check "skips non-hci names" file_has "$rule" '^KERNEL!="hci\[0-9\]\*", GOTO="bletransfer_end"$'
check "label closes the rule" file_has "$rule" '^LABEL="bletransfer_end"$'
check "asks systemd for both roles' units (their ExecCondition= picks the configured one)" file_has "$rule" '^TAG+="systemd", ENV{SYSTEMD_WANTS}+="bletransfer-receiver@%k.service bletransfer-sender@%k.service"$'
check "units bind to the controller's device unit" file_has "$repo/udev/bletransfer-receiver@.service" '^BindsTo=sys-subsystem-bluetooth-devices-%i.device$'

echo
echo "install-service: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
