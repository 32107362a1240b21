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
mkdir -p "$out/corpus" "$out/artifacts"

# swift-crypto (the header digest) is built by SwiftPM; the Transfer sources are compiled again
# below with fuzzer instrumentation and linked against its objects.
swift build --package-path "$root" --scratch-path "$scratch" --target Crypto >"$out/crypto-build.log" 2>&1 ||
    { cat "$out/crypto-build.log"; exit 1; }
bin=$(swift build --package-path "$root" --scratch-path "$scratch" --show-bin-path)
crypto_sources="$scratch/checkouts/swift-crypto/Sources"

objects=()
for target in Crypto CryptoBoringWrapper CCryptoBoringSSLShims CCryptoBoringSSL; do
    while IFS= read -r -d '' object; do objects+=("$object"); done \
        < <(find "$bin/$target.build" -name '*.o' -print0)
done

harness="$out/transfer-fuzz"
swiftc -sanitize=fuzzer,address -parse-as-library -O -g \
    -module-name TransferFuzz \
    -I "$bin/Modules" \
    -Xcc -fmodule-map-file="$crypto_sources/CCryptoBoringSSL/include/module.modulemap" \
    -Xcc -fmodule-map-file="$crypto_sources/CCryptoBoringSSLShims/include/module.modulemap" \
    -Xcc -I"$crypto_sources/CCryptoBoringSSL/include" \
    -Xcc -I"$crypto_sources/CCryptoBoringSSLShims/include" \
    "$root"/Sources/Transfer/*.swift "$root"/Sources/BluetoothModel/*.swift \
    "$root/scripts/fuzz/TransferFuzz.swift" -D TRANSFER_SINGLE_MODULE \
    "${objects[@]}" -lstdc++ \
    -o "$harness" >"$out/harness-build.log" 2>&1 ||
    { grep -v "Cannot export local symbol" "$out/harness-build.log"; exit 1; }

python3 "$root/scripts/fuzz/make-seeds.py" "$out/corpus"

echo "fuzzing the Transfer receiver for ${seconds}s (corpus: $out/corpus)"
status=0
"$harness" "$out/corpus" \
    -dict="$root/scripts/fuzz/transfer.dict" \
    -max_total_time="$seconds" -rss_limit_mb=512 -max_len=4096 -timeout=10 \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    >"$out/fuzz.log" 2>&1 || status=$?
tail -n 20 "$out/fuzz.log"
if [ "$status" -ne 0 ]; then
    echo "fuzz-transfer: the fuzzer found a problem (exit $status); reproducers in $out/artifacts" >&2
    exit "$status"
fi
echo "fuzz-transfer: no crash, leak or memory blow-up in ${seconds}s"
