#!/usr/bin/env bash
# Fuzzes the Trust core (Noise XX handshake in both roles, tampered transcripts, the frame reader
# and record opener, authorized-peers and identity file parsing) with libFuzzer + AddressSanitizer
# for a bounded time. Exits non-zero when the fuzzer finds a crash, a failed precondition, a leak
# or a run over the memory limit; the reproducer is left in $FUZZ_OUT/artifacts.
#
#   scripts/fuzz/trust/fuzz-trust.sh                 # 60 s
#   FUZZ_SECONDS=600 scripts/fuzz/trust/fuzz-trust.sh
#
# Environment: FUZZ_SECONDS (60), FUZZ_SCRATCH (.build-fuzz: SwiftPM scratch path used to build
# swift-crypto, shared with the Transfer fuzzer), FUZZ_OUT ($FUZZ_SCRATCH/fuzz-trust-out).
# Self-contained: finds the package root by walking up to Package.swift, so this directory can
# move. Idempotent: rebuilds only what changed and keeps the corpus between runs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$here
while [ ! -f "$root/Package.swift" ]; do
    [ "$root" != / ] || { echo "fuzz-trust: no Package.swift above $here" >&2; exit 1; }
    root=$(dirname "$root")
done
seconds=${FUZZ_SECONDS:-60}
scratch=${FUZZ_SCRATCH:-$root/.build-fuzz}
out=${FUZZ_OUT:-$scratch/fuzz-trust-out}
mkdir -p "$out/corpus" "$out/artifacts"

# swift-crypto is built by SwiftPM; the Trust sources are compiled again below with fuzzer
# instrumentation and linked against its objects.
swift build --package-path "$root" --scratch-path "$scratch" --target Crypto >"$out/crypto-build.log" 2>&1 ||
    { cat "$out/crypto-build.log"; exit 1; }
bin=$(swift build --package-path "$root" --scratch-path "$scratch" --show-bin-path)
crypto_sources="$scratch/checkouts/swift-crypto/Sources"

objects=()
for target in Crypto CryptoBoringWrapper CCryptoBoringSSLShims CCryptoBoringSSL; do
    while IFS= read -r -d '' object; do objects+=("$object"); done \
        < <(find "$bin/$target.build" -name '*.o' -print0)
done

harness="$out/trust-fuzz"
swiftc -sanitize=fuzzer,address -parse-as-library -O -g \
    -module-name TrustFuzz \
    -I "$bin/Modules" \
    -Xcc -fmodule-map-file="$crypto_sources/CCryptoBoringSSL/include/module.modulemap" \
    -Xcc -fmodule-map-file="$crypto_sources/CCryptoBoringSSLShims/include/module.modulemap" \
    -Xcc -I"$crypto_sources/CCryptoBoringSSL/include" \
    -Xcc -I"$crypto_sources/CCryptoBoringSSLShims/include" \
    "$root"/Sources/Trust/*.swift "$here/TrustFuzz.swift" \
    "${objects[@]}" -lstdc++ \
    -o "$harness" >"$out/harness-build.log" 2>&1 ||
    { grep -v "Cannot export local symbol" "$out/harness-build.log"; exit 1; }

# Seeds: one per mode (the layouts are in TrustFuzz.swift).
seed() { printf "$2" >"$out/corpus/seed-$1"; }
seed initiator '\000'"$(head -c 96 /dev/zero | tr '\0' 'A')"
seed responder '\001\000\040'"$(head -c 32 /dev/zero | tr '\0' 'B')$(head -c 64 /dev/zero | tr '\0' 'C')"
seed genuine '\002'
seed tampered '\002\001\000\050\001\000\002\000\001\000\004'
seed records '\003\001\000\003\001\000\004\000\000\000\001'
seed peers '\004# peers\nbletransfer-x25519 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8= laptop\n'
seed identity '\004bletransfer-x25519-private AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE= me\n'

echo "fuzzing the Trust core for ${seconds}s (corpus: $out/corpus)"
status=0
"$harness" "$out/corpus" \
    -dict="$here/trust.dict" \
    -max_total_time="$seconds" -rss_limit_mb=512 -max_len=4096 -timeout=10 \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    >"$out/fuzz.log" 2>&1 || status=$?
tail -n 20 "$out/fuzz.log"
if [ "$status" -ne 0 ]; then
    echo "fuzz-trust: the fuzzer found a problem (exit $status); reproducers in $out/artifacts" >&2
    exit "$status"
fi
echo "fuzz-trust: no crash, leak or memory blow-up in ${seconds}s"
