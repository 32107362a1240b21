#!/usr/bin/env bash
# The main job: a real `bletransfer send` → `bletransfer receive`.
#
#   scripts/demo.sh ["MESSAGE"]
#
# On a machine without a Bluetooth adapter it boots the two-host virtual BLE lab (two QEMU
# guests, each with its own kernel, bluetoothd and emulated controller), runs `bletransfer send`
# on host a and `bletransfer receive` on host b, and prints what b received. With an adapter
# present it builds the tool and prints the two commands to run on two hosts.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
message=${1:-"Hello over BLE from bletransfer ✓"}

has_adapter=0
if [ -d /sys/class/bluetooth ] && [ -n "$(ls -A /sys/class/bluetooth 2>/dev/null)" ]; then
  has_adapter=1
fi

if [ "$has_adapter" -eq 1 ]; then
  bash scripts/setup.sh
else
  bash scripts/setup.sh --lab
fi

echo "demo: building bletransfer (release)"
swift build -c release --product bletransfer 2>&1 | tail -n 3
export BLETRANSFER_BIN="$PWD/.build/release/bletransfer"

exec bash scripts/lab/lab.sh demo "$message"
