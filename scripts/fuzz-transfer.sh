#!/usr/bin/env bash
# Fuzzes the Transfer core's receiver and parsers with libFuzzer (+ AddressSanitizer) for a
# bounded time. Exits non-zero when the fuzzer finds a crash, a failed precondition, a leak or
# a run over the memory limit; the reproducer is left in $FUZZ_OUT.
#
#   scripts/fuzz-transfer.sh                 # 60 s
#   FUZZ_SECONDS=600 scripts/fuzz-transfer.sh
#
# Environment: FUZZ_SECONDS (60), FUZZ_SCRATCH (.build-fuzz: SwiftPM scratch path used to build
# swift-crypto), FUZZ_OUT (.build-fuzz/fuzz-out: binary, corpus, crash reproducers).
# Idempotent: rebuilds only what changed and keeps the corpus between runs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${FUZZ_SECONDS:-60}
scratch=${FUZZ_SCRATCH:-$root/.build-fuzz}
out=${FUZZ_OUT:-$scratch/fuzz-out}
# shellcheck source=fuzz/lib.sh
. "$root/scripts/fuzz/lib.sh"
harness="$out/transfer-fuzz"
fuzz_build "$harness" TransferFuzz \
    "$root"/Sources/Transfer/*.swift "$root"/Sources/BluetoothModel/*.swift "$root"/Sources/SystemCalls/PayloadFile.swift \
    "$root/scripts/fuzz/TransferFuzz.swift" -D TRANSFER_SINGLE_MODULE

python3 "$root/scripts/fuzz/make-seeds.py" "$out/corpus"

echo "fuzzing the Transfer receiver for ${seconds}s (corpus: $out/corpus)"
fuzz_run fuzz-transfer "$harness" "$root/scripts/fuzz/transfer.dict"
echo "fuzz-transfer: no crash, leak or memory blow-up in ${seconds}s"
