#!/usr/bin/env bash
# The lab's scenarios between two real hosts with BLE adapters, over SSH:
#   scripts/lab/hw.sh --a user@hostA --b user@hostB [--tag peers] [SCENARIO...]
# See scripts/lab/README.md ("Real hardware").
set -euo pipefail
exec python3 "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/hw.py" "$@"
