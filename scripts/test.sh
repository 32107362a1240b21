#!/usr/bin/env bash
# The test command: every tier, as CI runs it.
#
#   scripts/test.sh            set up, build, unit + bus tests, bounded fuzzing, service install,
#                              Debian package, two-host lab, hw.sh over SSH against two guests
#   scripts/test.sh --no-lab   everything but the virtual lab and the guests (fast inner loop)
#
# Ends with one line "summary: N passed, N failed" counting tests across the tiers; exits
# non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"

run_lab=1
for arg in "$@"; do
  case "$arg" in
    --no-lab) run_lab=0 ;;
    *) echo "test.sh: unknown option '$arg' (use --no-lab)" >&2; exit 64 ;;
  esac
done

passed=0 failed=0 failures=()
out_dir="${TEST_OUT:-$PWD/lab-out/test-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out_dir"
stage_started=$SECONDS
stage_name=""
stage() { # prints how long the previous stage took, then the new stage's title
  [ -n "$stage_name" ] && printf '(%s took %ds)\n' "$stage_name" $((SECONDS - stage_started))
  stage_name=$1 stage_started=$SECONDS
  printf '\n=== %s\n' "$*"
}
record() { # record NAME PASSED FAILED
  passed=$((passed + $2)); failed=$((failed + $3))
  [ "$3" -gt 0 ] && failures+=("$1")
  return 0
}
record_from_log() { # record_from_log NAME LOG PATTERN: counts from the last "N passed, M failed" line matching PATTERN; none is one failure
  local line
  line=$(grep -E "$3" "$2" 2>/dev/null | tail -n 1)
  if [ -n "$line" ]; then
    record "$1" "$(sed -nE 's/^[^0-9]*([0-9]+) passed.*/\1/p' <<<"$line")" "$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$line")"
  else
    record "$1" 0 1
  fi
}

stage "setup"
setup_args=()
[ "$run_lab" -eq 1 ] && setup_args+=(--lab)
if ! bash scripts/setup.sh "${setup_args[@]}"; then
  echo "test.sh: setup failed" >&2
  echo "summary: 0 passed, 1 failed"
  exit 1
fi

stage "source shape (scripts/check-shape.py)"
python3 scripts/check-shape.py >"$out_dir/shape.log" 2>&1
cat "$out_dir/shape.log"
record_from_log "source shape" "$out_dir/shape.log" '^shape: '

stage "build"
swift build --build-tests 2>&1 | tail -n 30
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  echo "test.sh: the package does not build (see above)" >&2
  echo "summary: 0 passed, 1 failed"
  exit 1
fi

stage "unit and bus tests (swift test)"
# In a session of its own, so that anything a test leaves running (a dbus-daemon, a mock)
# is reaped afterwards instead of holding the output open or outliving CI.
# Bounded: a test that hangs (a blocking wait on the cooperative pool) costs at most
# SWIFT_TEST_LIMIT seconds (a whole run takes 2-4 minutes), and is not run again.
swift_test_limit=${SWIFT_TEST_LIMIT:-1200}
run_swift_test() {  # $1: log file; sets swift_status
  setsid timeout --kill-after=30 "$swift_test_limit" swift test --skip-build >"$1" 2>&1 &
  local test_pid=$! started=$SECONDS
  wait "$test_pid"
  swift_status=$?
  swift_seconds=$((SECONDS - started))
  if pkill -KILL -s "$test_pid" 2>/dev/null; then
    echo "test.sh: warning: processes left behind by the tests were killed" >&2
  fi
}
run_swift_test "$out_dir/swift-test.log"
crash_report=""
# 124: timeout stopped it; 137 (SIGKILL) is a hang only when it came at the limit (timeout's
# --kill-after), not earlier (the kernel's OOM killer): that is a crash, run again below.
if [ "$swift_status" -eq 124 ] || { [ "$swift_status" -eq 137 ] && [ "$swift_seconds" -ge "$swift_test_limit" ]; }; then
  crash_report=$(printf 'swift test was stopped after %s s (a hang); its log ends with:\n%s' "$swift_test_limit" \
      "$(grep -vE '^\s*$' "$out_dir/swift-test.log" | tail -n 12 | cut -c1-240)")
  echo "test.sh: warning: swift test did not finish within $swift_test_limit s; not run again" >&2
elif ! grep -qE 'Test run with [0-9]+ tests?' "$out_dir/swift-test.log"; then
  # No closing line: the test process died (a crash or a signal) and took every test's verdict
  # with it. Its last words are kept and shown at the end; the run is made once more, so that
  # the verdicts of the 600 tests are not lost to one crash. A second crash fails the tier.
  crash_report=$(printf 'the first run ended without its summary (exit %s); its log ends with:\n%s' "$swift_status" \
      "$(grep -vE '^\s*$' "$out_dir/swift-test.log" | tail -n 12 | cut -c1-240)")
  mv "$out_dir/swift-test.log" "$out_dir/swift-test-crashed.log"
  echo "test.sh: warning: swift test died without its summary (exit $swift_status; log swift-test-crashed.log); running it again" >&2
  run_swift_test "$out_dir/swift-test.log"
fi
grep -vE 'Test .* started\.$|^(Test Suite|Test Case|\s+Executed)' "$out_dir/swift-test.log" | tail -n 60
# Swift Testing closes with "Test run with N tests in M suites passed|failed ... (K issues)".
summary_line=$(grep -E 'Test run with [0-9]+ tests?' "$out_dir/swift-test.log" | tail -n 1)
total=$(sed -nE 's/.*Test run with ([0-9]+) tests?.*/\1/p' <<<"$summary_line")
failing=$(grep -E 'Test .* failed after' "$out_dir/swift-test.log" | grep -vc 'Test run with' || true)
total=${total:-0}
if [ "$swift_status" -ne 0 ] && [ "$failing" -eq 0 ]; then failing=1; fi
record "swift test" $((total - failing < 0 ? 0 : total - failing)) "$failing"
# Repeated at the very end, where a reader of a long CI log looks first.
swift_failures=$(grep -E '✘ Test .* recorded an issue' "$out_dir/swift-test.log" | head -n 5)
if [ -z "$summary_line" ]; then
  swift_failures=$(printf 'ended without its summary again (exit %s); the log ends with:\n%s' "$swift_status" \
      "$(grep -vE '^\s*$' "$out_dir/swift-test.log" | tail -n 12 | cut -c1-240)")
fi
if [ -n "$crash_report" ]; then swift_failures=$(printf '%s\n%s' "$crash_report" "$swift_failures"); fi

if [ -x scripts/fuzz-transfer.sh ]; then
  stage "fuzzing the receiver's parser (bounded)"
  # Reuses the debug build above for swift-crypto's objects; the corpus lives with the logs.
  FUZZ_SCRATCH="$PWD/.build" FUZZ_OUT="$out_dir/fuzz" FUZZ_SECONDS="${FUZZ_SECONDS:-20}" \
      bash scripts/fuzz-transfer.sh 2>&1 | tail -n 15
  if [ "${PIPESTATUS[0]}" -eq 0 ]; then
    record fuzz 1 0
  else
    record fuzz 0 1
  fi
fi

stage "fuzzing the handshake and record parsers (bounded)"
FUZZ_SCRATCH="$PWD/.build" FUZZ_OUT="$out_dir/fuzz-trust" FUZZ_SECONDS="${FUZZ_SECONDS:-20}" \
    bash scripts/fuzz/trust/fuzz-trust.sh 2>&1 | tail -n 8
if [ "${PIPESTATUS[0]}" -eq 0 ]; then
  record fuzz-trust 1 0
else
  record fuzz-trust 0 1
fi

stage "the lab radio's model against published figures (python unittest)"
python3 -m unittest discover -s scripts/lab/tests -t scripts/lab/tests 2>&1 | tee "$out_dir/radio-model.log" | tail -n 4
radio_tests=$(sed -nE 's/^Ran ([0-9]+) tests?.*/\1/p' "$out_dir/radio-model.log" | tail -n 1)
if grep -qE '^OK' "$out_dir/radio-model.log"; then
  record radio-model "${radio_tests:-1}" 0
else
  record radio-model 0 1
fi

stage "service installation (throwaway root trees)"
bash scripts/test-install-service.sh 2>&1 | tee "$out_dir/install-service.log" | tail -n 5
record_from_log install-service "$out_dir/install-service.log" '^install-service: [0-9]+ passed, [0-9]+ failed'

stage "D-Bus policy of the service user (private dbus-daemon, BlueZoo)"
bash udev/test-dbus-policy.sh 2>&1 | tee "$out_dir/dbus-policy.log" | tail -n 5
if ! grep -qE '^dbus-policy: [0-9]+ passed' "$out_dir/dbus-policy.log" && grep -q "skipped" "$out_dir/dbus-policy.log"; then
  echo "dbus-policy: skipped (see $out_dir/dbus-policy.log)"
else
  record_from_log dbus-policy "$out_dir/dbus-policy.log" '^dbus-policy: [0-9]+ passed, [0-9]+ failed'
fi

stage "Debian package (build, lintian, install/remove/purge in a throwaway root)"
# The static release build has a scratch directory of its own (.build-deb): sharing .build
# with the lab's release build would not save time, SwiftPM recompiles every module when
# --static-swift-stdlib is switched on or off.
bash scripts/test-package-deb.sh 2>&1 | tee "$out_dir/debian-package.log" | tail -n 40
record_from_log debian-package "$out_dir/debian-package.log" '^debian-package: [0-9]+ passed, [0-9]+ failed'

if [ "$run_lab" -eq 1 ]; then
  stage "two-host virtual lab"
  # The package stage's static release build runs in the guests as it is (and is what users
  # install); a second release build here would cost as long again.
  if [ -x .build-deb/release/bletransfer ]; then
    export BLETRANSFER_BIN="$PWD/.build-deb/release/bletransfer"
  else
    swift build -c release --product bletransfer 2>&1 | tail -n 3
    export BLETRANSFER_BIN="$PWD/.build/release/bletransfer"
  fi
  echo "lab binary: $BLETRANSFER_BIN"
  bash scripts/lab/lab.sh suite 2>&1 | tee "$out_dir/lab.log"
  record_from_log lab "$out_dir/lab.log" '^\s*[0-9]+ passed, [0-9]+ failed'

  stage "real-host runner: hw.sh over SSH against two systemd guests with the package installed"
  deb=$(sed -nE 's/^ok   scripts\/package-deb\.sh built (.*) \([0-9]+s\)$/\1/p' "$out_dir/debian-package.log" | tail -n 1)
  if [ -n "$deb" ] && [ -f "$deb" ]; then
    bash scripts/lab/ssh-guests.sh check --deb "$deb" 2>&1 | tee "$out_dir/ssh-guests.log" | tail -n 40
  else
    echo "test.sh: the Debian package stage left no package to install" >&2
  fi
  record_from_log ssh-guests "$out_dir/ssh-guests.log" '^ssh-guests: [0-9]+ passed, [0-9]+ failed'
fi

stage "done"
echo "total wall time: ${SECONDS}s"
[ "${#failures[@]}" -gt 0 ] && echo "failed tiers: ${failures[*]} (logs in $out_dir)"
[ -n "${swift_failures:-}" ] && sed 's/^/swift test: /' <<<"$swift_failures" | cut -c1-400
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
