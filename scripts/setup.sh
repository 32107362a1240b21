#!/usr/bin/env bash
# Prepares a Debian 12 machine to build, test and run bletransfer. Idempotent: packages
# already present are not fetched again. Runs as root (or through sudo).
#
#   scripts/setup.sh            build + test dependencies (apt and pip)
#   scripts/setup.sh --lab      also the two-host virtual lab (QEMU, guest kernel, initramfs)
set -euo pipefail
cd "$(dirname "$0")/.."

with_lab=0
for arg in "$@"; do
  case "$arg" in
    --lab) with_lab=1 ;;
    *) echo "setup.sh: unknown option '$arg' (use --lab)" >&2; exit 64 ;;
  esac
done

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Build: C headers for libdbus-1 and libbluetooth. Tests: dbus-daemon, gdbus/busctl-style
# third-party clients, bluetoothd and the BlueZ test tools.
apt_packages=(
  pkg-config libdbus-1-dev libbluetooth-dev
  dbus libglib2.0-bin systemd bluez bluez-test-tools procps util-linux
  python3 python3-pip python3-venv
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python peers for tests: BlueZoo (BlueZ mock), bleak (central) and bless (peripheral) play
# the third-party side. Pinned so a new release cannot change a test's meaning overnight.
python_bin=$(command -v python3)
pip_packages=(bluezoo==1.0.2 bleak==3.1.0 bless==0.3.0)
if ! "$python_bin" - <<'PY' 2>/dev/null
import importlib.metadata as m
want = {"bluezoo": "1.0.2", "bleak": "3.1.0", "bless": "0.3.0"}
raise SystemExit(0 if all(m.version(k) == v for k, v in want.items()) else 1)
PY
then
  echo "setup: installing ${pip_packages[*]}"
  pip_flags=(-q --disable-pip-version-check)
  # Debian's own python3 refuses system-wide pip installs unless told otherwise (PEP 668).
  if "$python_bin" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    case "$python_bin" in /usr/bin/*) pip_flags+=(--break-system-packages) ;; esac
  fi
  as_root "$python_bin" -m pip install "${pip_flags[@]}" "${pip_packages[@]}"
fi

if ! command -v swift >/dev/null 2>&1; then
  if [ -x /opt/swift/usr/bin/swift ]; then
    echo "setup: swift is at /opt/swift/usr/bin; add it to PATH"
  else
    echo "setup: Swift 6.1 or newer is required (https://www.swift.org/install/linux/)" >&2
    exit 69
  fi
fi

if [ "$with_lab" -eq 1 ]; then
  bash scripts/lab/lab.sh setup
fi
echo "setup: done"
