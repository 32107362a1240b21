#!/usr/bin/env bash
# Fuzzes the Trust core (Noise XX handshake in both roles, tampered transcripts, the frame reader
# and record opener, authorized-peers and identity file parsing, the secure sessions' state
# machines fed arbitrary notification values and writes, keyed and keyless) with libFuzzer + AddressSanitizer
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
# shellcheck source=../lib.sh
. "$root/scripts/fuzz/lib.sh"
harness="$out/trust-fuzz"
fuzz_build "$harness" TrustFuzz "$root"/Sources/Trust/*.swift "$root"/Sources/Trust/Session/*.swift \
    "$root"/Sources/Transfer/MessagePayload.swift "$root"/Sources/Transfer/MessageHeader.swift \
    "$root"/Sources/SystemCalls/PayloadFile.swift "$here/TrustFuzz.swift"

# Seeds: one per mode (the layouts are in TrustFuzz.swift).
seed() { printf "$2" >"$out/corpus/seed-$1"; }
seed initiator '\000'"$(head -c 96 /dev/zero | tr '\0' 'A')"
seed responder '\001\000\040'"$(head -c 32 /dev/zero | tr '\0' 'B')$(head -c 64 /dev/zero | tr '\0' 'C')"
seed genuine '\002'
seed tampered '\002\001\000\050\001\000\002\000\001\000\004'
seed records '\003\001\000\003\001\000\004\000\000\000\001'
seed peers '\004# peers\nbletransfer-x25519 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8= laptop\n'
seed identity '\004bletransfer-x25519-private AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE= me\n'
seed receiver '\005\000\000\240\004\001\000\040\001\200\002\000\000\100\000'
seed receiver-edited '\005\001\100\003\000\010\001\000'
seed sender-handshake '\006\000\000\200\010\001\000\140\001\002\003\004\005'
seed sender-ack '\006\001\000\200\010\002\000\066\001\002\003\004\005'
# A central without keys fed what a retired plain-mode sender sent (an empty message): refused.
seed keyless-receiver '\007\266\000\240\107\003\000\057\001\000\000\000\000\000\000\000\000\000\000\000\000\343\260\304\102\230\374\034\024\232\373\364\310\231\157\271\044\047\256\101\344\144\233\223\114\244\225\231\033\170\122\270\125\000\000\003\000\015\003\000\000\000\000\000\000\000\000\000\000\000\000\003\000\002\006\000\100\000'

echo "fuzzing the Trust core for ${seconds}s (corpus: $out/corpus)"
fuzz_run fuzz-trust "$harness" "$here/trust.dict"
echo "fuzz-trust: no crash, leak or memory blow-up in ${seconds}s"
