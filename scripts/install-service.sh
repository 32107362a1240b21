#!/usr/bin/env bash
# Installs bletransfer for unattended operation: the binary, a system user, the per-controller
# systemd units and their configuration check, the udev rule that starts them,
# /etc/default/bletransfer (with the chosen role: BLETRANSFER_ROLE), the service's
# identity (/var/lib/bletransfer/identity, created once) and /etc/bletransfer/authorized-peers
# (created once, comments only: the daemons refuse to start until a peer's key is listed).
#
#   scripts/install-service.sh [--role receiver|sender] [--prefix /usr/local]
#                              [--binary PATH] [--root DIR] [--no-start]
#   scripts/install-service.sh --uninstall [--prefix /usr/local] [--root DIR]
#
#   --role      which daemon runs on every Bluetooth controller (default: receiver); written
#               as BLETRANSFER_ROLE= into /etc/default/bletransfer, where it is one line
#   --prefix    where the binary and documentation go (default: /usr/local)
#   --binary    the bletransfer executable to install (default: .build/release/bletransfer)
#   --root      install into DIR as if it were / (nothing outside DIR is touched, no service
#               is reloaded or started; DIR/etc must hold passwd, group, shadow, gshadow)
#   --no-start  do not start daemons for controllers that are already present
#   --uninstall remove binary, units, check, rule and documentation; keeps /etc/default/bletransfer,
#               /etc/bletransfer, the user and /var/lib/bletransfer (received and unsent
#               files, the service's identity)
#
# Safe to run again: an upgrade or a change of role is the same command.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_dir="$(dirname "$script_dir")"

role=receiver
prefix=/usr/local
binary=""
root=""
uninstall=0
start=1
user=bletransfer
group=bletransfer

die() { echo "install-service: $*" >&2; exit "${2:-1}"; }
usage_error() { die "$1 (see --help)" 64; }
note() { echo "install-service: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --role) [ $# -ge 2 ] || usage_error "--role needs receiver or sender"; role="$2"; shift 2 ;;
    --role=*) role="${1#*=}"; shift ;;
    --prefix) [ $# -ge 2 ] || usage_error "--prefix needs a directory"; prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#*=}"; shift ;;
    --binary) [ $# -ge 2 ] || usage_error "--binary needs a path"; binary="$2"; shift 2 ;;
    --binary=*) binary="${1#*=}"; shift ;;
    --root) [ $# -ge 2 ] || usage_error "--root needs a directory"; root="$2"; shift 2 ;;
    --root=*) root="${1#*=}"; shift ;;
    --uninstall) uninstall=1; shift ;;
    --no-start) start=0; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown option '$1'" ;;
  esac
done

case "$role" in receiver|sender) ;; *) usage_error "--role must be receiver or sender, not '$role'" ;; esac
case "$prefix" in /*) prefix="${prefix%/}"; [ -n "$prefix" ] || prefix=/ ;; *) usage_error "--prefix must be an absolute path" ;; esac
case "$prefix" in *[[:space:]\|\&\\]*) usage_error "--prefix must not contain spaces, '|', '&' or '\\'" ;; esac
if [ -n "$root" ]; then
  [ -d "$root" ] || die "--root $root is not a directory" 64
  root="$(cd "$root" && pwd)"
  [ "$root" != / ] || root=""
fi
[ "$(id -u)" -eq 0 ] || die "run as root (sudo); it creates a system user and writes under /etc" 77

bin_dir="$root$prefix/bin"
libexec_dir="$root$prefix/libexec/bletransfer"
doc_dir="$root$prefix/share/doc/bletransfer"
unit_dir="$root/etc/systemd/system"
rule_dir="$root/etc/udev/rules.d"
rule_file="$rule_dir/70-bletransfer.rules"
dbus_policy_dir="$root/etc/dbus-1/system.d"
dbus_policy_file="$dbus_policy_dir/bletransfer.conf"
env_file="$root/etc/default/bletransfer"
trust_dir="$root/etc/bletransfer"
peers_file="$trust_dir/authorized-peers"
state_dir="$root/var/lib/bletransfer"
units=("bletransfer-receiver@.service" "bletransfer-sender@.service")

# Only a real installation on this machine talks to the running systemd and udev.
live=0
[ -z "$root" ] && live=1
systemd_running() { [ "$live" -eq 1 ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; }
udev_running() { [ "$live" -eq 1 ] && command -v udevadm >/dev/null && udevadm control --ping >/dev/null 2>&1; }

stop_instances() { # role…
  systemd_running || return 0
  local r
  for r in "$@"; do
    systemctl stop "bletransfer-$r@*.service" 2>/dev/null || true
  done
}

reload_managers() {
  if systemd_running; then
    systemctl daemon-reload
  elif [ "$live" -eq 1 ]; then
    note "systemd is not running here: skipped systemctl daemon-reload"
  fi
  if systemd_running && systemctl is-active --quiet dbus 2>/dev/null; then
    systemctl reload dbus  # the bus reads the policy file again
  fi
  if udev_running; then
    udevadm control --reload
  elif [ "$live" -eq 1 ]; then
    note "udev is not running here: skipped udevadm control --reload"
  fi
}

if [ "$uninstall" -eq 1 ]; then
  stop_instances receiver sender
  rm -f "$rule_file" "$bin_dir/bletransfer" "$libexec_dir/check-configuration" "$doc_dir/unattended.md" "$dbus_policy_file"
  for unit in "${units[@]}"; do rm -f "$unit_dir/$unit"; done
  rmdir "$doc_dir" "$libexec_dir" 2>/dev/null || true
  reload_managers
  note "removed; kept $root/etc/default/bletransfer, $trust_dir, the user '$user' and $root/var/lib/bletransfer"
  exit 0
fi

# The binary.
if [ -z "$binary" ]; then
  binary="$repo_dir/.build/release/bletransfer"
  [ -x "$binary" ] || die "no binary at $binary: build it first (swift build -c release --static-swift-stdlib) or pass --binary PATH" 66
fi
[ -f "$binary" ] && [ -x "$binary" ] || die "--binary $binary is not an executable file" 66
if command -v ldd >/dev/null && runtime=$(ldd "$binary" 2>/dev/null | awk '/libswiftCore\.so/ {print $3}') && [ -n "$runtime" ]; then
  case "$runtime" in
    /root/*|/home/*|/run/user/*|/tmp/*)
      note "warning: $binary loads the Swift runtime from $(dirname "$runtime"), which the service cannot see (ProtectHome/PrivateTmp); build with --static-swift-stdlib" ;;
  esac
fi

# The user: a system account without a login. Its D-Bus rights come from our own policy file
# (udev/bletransfer-dbus.conf: only the org.bluez methods bletransfer calls), not from the
# group "bluetooth", whose policy allows everything in org.bluez.
has_group() {
  if [ -n "$root" ]; then grep -q "^$1:" "$root/etc/group"; else getent group "$1" >/dev/null; fi
}
has_user() {
  if [ -n "$root" ]; then grep -q "^$1:" "$root/etc/passwd"; else getent passwd "$1" >/dev/null; fi
}
in_group() { # user group
  if [ -n "$root" ]; then
    awk -F: -v g="$2" -v u="$1" '$1 == g { n = split($4, m, ","); for (i = 1; i <= n; i++) if (m[i] == u) found = 1 } END { exit !found }' "$root/etc/group"
  else
    id -nG "$1" | tr ' ' '\n' | grep -qx "$2"
  fi
}
root_args=()
[ -n "$root" ] && root_args=(--root "$root")
nologin=/usr/sbin/nologin
[ -x "$root$nologin" ] || [ -n "$root" ] || nologin=/bin/false

has_group "$group" || groupadd "${root_args[@]}" --system "$group"
if ! has_user "$user"; then
  useradd "${root_args[@]}" --system --gid "$group" --home-dir /var/lib/bletransfer \
    --no-create-home --shell "$nologin" --comment "bletransfer daemon" "$user" 2> >(grep -v "missing or non-executable shell" >&2)
  note "created system user '$user' (group: $group)"
fi
# An earlier install put the user into "bluetooth": take it out, the policy file replaces it.
if has_group bluetooth && in_group "$user" bluetooth; then
  gpasswd "${root_args[@]}" -d "$user" bluetooth >/dev/null
  note "removed '$user' from group bluetooth (its D-Bus rights are now in $dbus_policy_file)"
fi

# Files.
install -d -m 0755 "$bin_dir" "$libexec_dir" "$doc_dir" "$unit_dir" "$rule_dir" "$root/etc/default"
# Copy then rename, so a running daemon's executable is never written in place.
install -m 0755 "$binary" "$bin_dir/.bletransfer.new"
mv -f "$bin_dir/.bletransfer.new" "$bin_dir/bletransfer"
# The units' ExecCondition=: skips a unit that is not configured (role, authorized peer).
install -m 0755 "$repo_dir/udev/check-configuration" "$libexec_dir/.check-configuration.new"
mv -f "$libexec_dir/.check-configuration.new" "$libexec_dir/check-configuration"
install -m 0644 "$repo_dir/docs/unattended.md" "$doc_dir/unattended.md"
install -d -m 0755 "$dbus_policy_dir"
install -m 0644 "$repo_dir/udev/bletransfer-dbus.conf" "$dbus_policy_dir/.bletransfer.conf.new"
mv -f "$dbus_policy_dir/.bletransfer.conf.new" "$dbus_policy_file"
# The units in udev/ name the packaged paths (/usr/bin…): here they name the prefix's.
for unit in "${units[@]}"; do
  sed -e "s|/usr/bin/bletransfer|$prefix/bin/bletransfer|g" \
      -e "s|/usr/libexec/bletransfer/|$prefix/libexec/bletransfer/|g" \
      -e "s|/usr/share/doc/bletransfer|$prefix/share/doc/bletransfer|g" \
      "$repo_dir/udev/$unit" > "$unit_dir/.$unit.new"
  chmod 0644 "$unit_dir/.$unit.new"
  mv -f "$unit_dir/.$unit.new" "$unit_dir/$unit"
done
# The role is one line of /etc/default/bletransfer (the units' ExecCondition= reads it); the
# rule asks for both roles' units and is installed as it is. An install from before the role
# line named the role in the rule instead.
previous_role=""
if [ -f "$env_file" ]; then
  previous_role=$(sed -n 's/^[[:space:]]*BLETRANSFER_ROLE=["'\'']\{0,1\}\([a-z]*\).*/\1/p' "$env_file" | tail -n 1)
fi
if [ -z "$previous_role" ] && [ -f "$rule_file" ]; then
  previous_role=$(sed -n 's/.*SYSTEMD_WANTS}+="bletransfer-\(receiver\|sender\)@%k\.service".*/\1/p' "$rule_file" | head -n 1)
fi
install -m 0644 "$repo_dir/udev/70-bletransfer.rules" "$rule_dir/.70-bletransfer.rules.new"
mv -f "$rule_dir/.70-bletransfer.rules.new" "$rule_file"

# /etc/default/bletransfer: the package's file (debian/bletransfer.default) the first time,
# with this prefix's documentation path; later runs keep every line but the role's.
if [ ! -f "$env_file" ]; then
  sed -e "s|/usr/share/doc/bletransfer|$prefix/share/doc/bletransfer|g" \
    "$repo_dir/debian/bletransfer.default" > "$env_file.new"
else
  cp -p "$env_file" "$env_file.new"
fi
if grep -q '^[[:space:]]*BLETRANSFER_ROLE=' "$env_file.new"; then
  sed -i "s/^[[:space:]]*BLETRANSFER_ROLE=.*/BLETRANSFER_ROLE=$role/" "$env_file.new"
else
  printf '# This host\x27s role: receiver or sender (scripts/install-service.sh --role).\nBLETRANSFER_ROLE=%s\n' "$role" >> "$env_file.new"
fi
chmod 0644 "$env_file.new"
mv -f "$env_file.new" "$env_file"

# The data directory exists before the first start, so files can be dropped into the outbox
# right away; systemd's StateDirectory= keeps owner and mode right from then on.
uid_of() { if [ -n "$root" ]; then awk -F: -v u="$1" '$1 == u {print $3}' "$root/etc/passwd"; else id -u "$1"; fi; }
gid_of() { if [ -n "$root" ]; then awk -F: -v g="$1" '$1 == g {print $3}' "$root/etc/group"; else getent group "$1" | cut -d: -f3; fi; }
install -d -m 0755 "$state_dir"
if [ "$role" = receiver ]; then
  install -d -m 0750 -o "$(uid_of "$user")" -g "$(gid_of "$group")" "$state_dir/inbox"
else
  install -d -m 2770 -o "$(uid_of "$user")" -g "$(gid_of "$group")" "$state_dir/outbox"
fi

# Trust: the daemons require the secure mode, so they need the service's identity and at
# least one authorized peer. The identity is created once and never replaced (peers list its
# public key). keygen runs as root because /var/lib/bletransfer belongs to root (the service
# may write only its inbox or outbox); the file is handed to the service user right after, and
# is mode 0600 throughout. With --root the user exists only in DIR/etc/passwd, so it is
# chowned by number.
identity="$state_dir/identity"
key_name="$user@$(hostname -s 2>/dev/null || echo host)"
if [ ! -e "$identity" ]; then
  keygen_output=$("$bin_dir/bletransfer" keygen --identity "$identity" --name "$key_name" 2>&1) ||
    die "bletransfer keygen --identity $identity failed: $(printf '%s' "$keygen_output" | tail -n 1)" 70
  chown "$(uid_of "$user"):$(gid_of "$group")" "$identity"
  chmod 0600 "$identity"
  note "created the service's identity $identity"
fi
public_key=$("$bin_dir/bletransfer" id --identity "$identity" 2>&1 | head -n 1)
case "$public_key" in
  bletransfer-x25519\ *) ;;
  *) die "bletransfer id --identity $identity failed: $public_key" 70 ;;
esac
install -d -m 0755 "$trust_dir"
if [ ! -e "$peers_file" ]; then
  install -m 0644 "$repo_dir/udev/authorized-peers" "$peers_file.new"
  mv -f "$peers_file.new" "$peers_file"
  note "created $peers_file (no peers yet)"
fi

# A role change stops the daemons of the other role.
if [ -n "$previous_role" ] && [ "$previous_role" != "$role" ]; then
  stop_instances "$previous_role"
fi
reload_managers
if [ "$start" -eq 1 ] && systemd_running && udev_running; then
  # Controllers present now do not produce an "add" event by themselves.
  udevadm trigger --action=add --subsystem-match=bluetooth
fi

note "installed the $role daemon (BLETRANSFER_ROLE=$role in $env_file): $prefix/bin/bletransfer, $unit_dir/bletransfer-{receiver,sender}@.service, $rule_file, $dbus_policy_file"
note "the service's public key: $public_key"
if ! grep -q '^[[:space:]]*bletransfer-x25519[[:space:]]' "$peers_file"; then
  note "next: add the peer's public key line (bletransfer id on the peer) to $peers_file and this key to the peer's, then: systemctl restart 'bletransfer-*@*.service'"
fi
if [ "$live" -eq 1 ] && ! systemd_running; then
  note "systemd is not running: start by hand, e.g. runuser -u $user -- $prefix/bin/bletransfer daemon --role $role …"
fi
