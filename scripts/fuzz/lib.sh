# Shared by the fuzz scripts (sourced): builds a libFuzzer + AddressSanitizer harness from Swift
# sources linked against swift-crypto's objects, and runs it for a bounded time.
#
# Callers set: root (the package), scratch (SwiftPM scratch path), out (binary, corpus,
# artifacts, logs), seconds.

# fuzz_build HARNESS MODULE SOURCE... [-- EXTRA_SWIFTC_FLAGS...]: compiles the harness.
fuzz_build() {
    local harness=$1 module=$2
    shift 2
    mkdir -p "$out/corpus" "$out/artifacts"
    # swift-crypto is built by SwiftPM; the sources are compiled again with fuzzer
    # instrumentation and linked against its objects. The package's own modules (SystemCalls,
    # Transfer) are found as interfaces only, and they name swift-system's CSystem: its module
    # map is passed too, so that importing them type-checks.
    swift build --package-path "$root" --scratch-path "$scratch" --target Crypto >"$out/crypto-build.log" 2>&1 ||
        { cat "$out/crypto-build.log"; return 1; }
    local bin crypto_sources
    bin=$(swift build --package-path "$root" --scratch-path "$scratch" --show-bin-path)
    crypto_sources="$scratch/checkouts/swift-crypto/Sources"
    local objects=() target object
    for target in Crypto CryptoBoringWrapper CCryptoBoringSSLShims CCryptoBoringSSL; do
        while IFS= read -r -d '' object; do objects+=("$object"); done \
            < <(find "$bin/$target.build" -name '*.o' -print0)
    done
    swiftc -sanitize=fuzzer,address -parse-as-library -O -g -package-name bletransfer \
        -module-name "$module" \
        -I "$bin/Modules" \
        -Xcc -fmodule-map-file="$crypto_sources/CCryptoBoringSSL/include/module.modulemap" \
        -Xcc -fmodule-map-file="$crypto_sources/CCryptoBoringSSLShims/include/module.modulemap" \
        -Xcc -fmodule-map-file="$scratch/checkouts/swift-system/Sources/CSystem/include/module.modulemap" \
        -Xcc -I"$crypto_sources/CCryptoBoringSSL/include" \
        -Xcc -I"$crypto_sources/CCryptoBoringSSLShims/include" \
        "$@" "${objects[@]}" -lstdc++ \
        -o "$harness" >"$out/harness-build.log" 2>&1 ||
        { grep -v "Cannot export local symbol" "$out/harness-build.log"; return 1; }
}

# fuzz_run NAME HARNESS DICT: runs the harness on $out/corpus for $seconds; non-zero (with the
# reproducer in $out/artifacts) when it finds a crash, a failed precondition, a leak or a run
# over the memory limit.
fuzz_run() {
    local name=$1 harness=$2 dict=$3 status=0
    "$harness" "$out/corpus" \
        -dict="$dict" \
        -max_total_time="$seconds" -rss_limit_mb=512 -max_len=4096 -timeout=10 \
        -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
        >"$out/fuzz.log" 2>&1 || status=$?
    tail -n 20 "$out/fuzz.log"
    if [ "$status" -ne 0 ]; then
        echo "$name: the fuzzer found a problem (exit $status); reproducers in $out/artifacts" >&2
        return "$status"
    fi
}
