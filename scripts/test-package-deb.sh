#!/usr/bin/env bash
# Tests the Debian package: that scripts/package-deb.sh builds it with dpkg-buildpackage and
# lintian reports no error or warning; then, in a throwaway root (a copy-on-write overlay of
# this machine's own root, in RAM, in a mount namespace of its own, so nothing on this machine
# changes), installs, configures, removes and purges it with dpkg and checks each step:
#   - install: the binary runs without Swift, names its version and commit; service user,
#     directories and identity exist, /etc/bletransfer/authorized-peers holds comments only;
#     units (with /usr/bin, an ExecCondition= and an [Install] section) verify; each man page
#     lists the options its command's --help lists; bash completes the subcommands;
#   - unconfigured: the units' ExecCondition= (run as the unit runs it: service user, the
#     variables of /etc/default/bletransfer) skips both roles with one line saying what to
#     configure; the daemon itself would refuse (78);
#   - configure: one line chooses the role (BLETRANSFER_ROLE=receiver), one line lists the
#     peer: the condition lets the receiver start, still skips the sender, and the daemon runs;
#   - remove: the binary is gone, the configuration, the user and the data stay;
#   - purge: configuration and identity are gone, the system user stays (Debian policy) and so
#     do the received files, whose place purge prints; everything else under /etc, /usr,
#     /var/lib is as it was before the install.
# systemd and udev do not run in that root, so the maintainer scripts skip reloading them (the
# guest run in scripts/lab/ssh-guests.sh covers that part).
#
#   scripts/test-package-deb.sh [--deb PATH] [--scratch-path DIR]
#       --deb           the package to test (default: build it with scripts/package-deb.sh)
#       --scratch-path  passed to scripts/package-deb.sh
#
# Ends with "debian-package: N passed, M failed"; exits non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

deb="" build_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb=$2; shift 2 ;;
    --scratch-path) build_args+=(--scratch-path "$2"); shift 2 ;;
    *) echo "test-package-deb: unknown option '$1'" >&2; exit 64 ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "test-package-deb: needs root (mount namespace, overlay, dpkg); skipped"
  echo "debian-package: 0 passed, 0 failed"
  exit 0
fi

passed=0 failed=0
check() { # description command…
  local description="$1"; shift
  if "$@" >/dev/null 2>"$work/check.err"; then
    passed=$((passed + 1)); echo "ok   $description"
  else
    failed=$((failed + 1)); echo "FAIL $description"; sed 's/^/     /' "$work/check.err" | head -n 20
  fi
}

work=$(mktemp -d /tmp/bletransfer-deb-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

built_here=""
if [ -z "$deb" ]; then
  built_here=1
  started=$SECONDS
  if deb=$(bash scripts/package-deb.sh "${build_args[@]}" 2>"$work/package.log" | tail -n 1) && [ -f "$deb" ]; then
    passed=$((passed + 1)); echo "ok   scripts/package-deb.sh built $deb ($((SECONDS - started))s)"
    # dpkg-buildpackage ran debian/rules and left its .changes and .buildinfo beside the .deb.
    if grep -q '^ debian/rules binary$' "$work/package.log" && grep -q '^dh binary$' "$work/package.log" &&
       [ -f "${deb%.deb}.changes" ] && [ -f "${deb%.deb}.buildinfo" ]; then
      passed=$((passed + 1)); echo "ok   built by dpkg-buildpackage with debhelper (dh), .changes and .buildinfo beside it"
    else
      failed=$((failed + 1)); echo "FAIL built by dpkg-buildpackage with debhelper (dh)"
    fi
    lintian_line=$(grep '^package-deb: lintian: ' "$work/package.log" | tail -n 1)
    if grep -q '^package-deb: lintian: no errors, no warnings' <<<"$lintian_line"; then
      passed=$((passed + 1)); echo "ok   lintian: no errors, no warnings, no overrides (${lintian_line#*warnings; })"
    else
      failed=$((failed + 1)); echo "FAIL lintian: ${lintian_line:-no lintian result}"
    fi
    if ! dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -q 'usr/share/lintian/overrides'; then
      passed=$((passed + 1)); echo "ok   the package carries no lintian overrides"
    else
      failed=$((failed + 1)); echo "FAIL the package carries lintian overrides"
    fi
  else
    failed=$((failed + 1)); echo "FAIL scripts/package-deb.sh"; tail -n 30 "$work/package.log" | sed 's/^/     /'
    echo "debian-package: $passed passed, $failed failed"
    exit 1
  fi
fi
deb=$(realpath "$deb")
# A package built here names this checkout's commit in --version.
expected_commit=""
[ -z "$built_here" ] || expected_commit=$(git rev-parse --short=12 HEAD 2>/dev/null || true)

# Everything below runs inside the namespace; its checks print ok/FAIL lines that are counted
# here. The root is the overlay; /proc and /dev come from this machine, the package from $work.
cp "$deb" "$work/package.deb"
echo "$expected_commit" > "$work/expected-commit"
cat > "$work/inside.sh" <<'INSIDE'
set -uo pipefail
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; [ -z "${2:-}" ] || printf '%s\n' "$2" | head -n 20 | sed 's/^/     /'; }
check() { local d="$1"; shift; local out; if out=$("$@" 2>&1); then ok "$d"; else fail "$d" "$out"; fi; }

# What "as it was" means: paths, types, modes and owners under /etc, /usr, /var/lib; sizes and
# times of files; contents of /etc. Left out: dpkg's own records (/var/lib/dpkg), the backups
# shadow's tools make of the user database (/etc/passwd- …) and their lock, which record that
# a user was added and removed, not a change of the system.
snapshot() {
  find /etc /usr /var/lib -xdev \( -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/lib/systemd/deb-systemd-helper-enabled \) -prune -o \
       ! -name passwd- ! -name group- ! -name shadow- ! -name gshadow- ! -name .pwd.lock -printf '%p %y %m %u %g\n' | sort
  find /usr /var/lib -xdev -path /var/lib/dpkg -prune -o -type f -printf '%p %s %T@\n' | sort
  find /etc -xdev -type f ! -name passwd- ! -name group- ! -name shadow- ! -name gshadow- ! -name .pwd.lock \
       -exec md5sum {} + 2>/dev/null | sort
}
snapshot > /tmp/before
for f in passwd group shadow gshadow; do cp /etc/$f /tmp/$f.before; done

out=$(dpkg -i /tmp/package.deb 2>&1); status=$?
if [ $status -eq 0 ]; then ok "dpkg -i installs the package"; else fail "dpkg -i installs the package" "$out"; echo "$out" >&2; exit 0; fi
echo "$out" | grep '^bletransfer:' | sed 's/^/     dpkg -i: /'

version=$(/usr/bin/bletransfer --version 2>&1)
check "--version names version and commit ($version)" grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]{7,}(-dirty)?\)$' <<<"$version"
if [ -s /tmp/expected-commit ]; then
  check "... the commit built from ($(cat /tmp/expected-commit))" grep -Eq "\(commit $(cat /tmp/expected-commit)(-dirty)?\)$" <<<"$version"
fi
check "the binary loads no Swift library" bash -c '! ldd /usr/bin/bletransfer | grep -E "libswift|libFoundation|libdispatch"'
check "service user exists with nologin shell (sysusers.d)" bash -c 'getent passwd bletransfer | grep -q ":/var/lib/bletransfer:/usr/sbin/nologin$"'
check "service user is not in group bluetooth (its D-Bus policy grants what it needs)" bash -c '! id -nG bletransfer | tr " " "\n" | grep -qx bluetooth'
check "the service user's D-Bus policy is installed" test -f /usr/share/dbus-1/system.d/bletransfer.conf
check "inbox is bletransfer:bletransfer 750 (tmpfiles.d)" bash -c '[ "$(stat -c "%U:%G %a" /var/lib/bletransfer/inbox)" = "bletransfer:bletransfer 750" ]'
check "outbox is bletransfer:bletransfer 2770 (tmpfiles.d)" bash -c '[ "$(stat -c "%U:%G %a" /var/lib/bletransfer/outbox)" = "bletransfer:bletransfer 2770" ]'
check "service identity is bletransfer:bletransfer 600" bash -c '[ "$(stat -c "%U:%G %a" /var/lib/bletransfer/identity)" = "bletransfer:bletransfer 600" ]'
public_key=$(bletransfer id --identity /var/lib/bletransfer/identity 2>&1 | head -n 1)
check "the install printed the service's public key line ($public_key)" grep -qxF "bletransfer: the service's public key: $public_key" <<<"$out"
check "the install printed the next steps (choose the role, list a peer)" bash -c 'grep -q "next: choose this host.s role, one line in /etc/default/bletransfer: BLETRANSFER_ROLE=receiver (or sender)" <<<"$1" && grep -q "next: add the peer.s public key line to /etc/bletransfer/authorized-peers" <<<"$1"' _ "$out"
check "/etc/bletransfer/authorized-peers holds comments only" bash -c '! grep -v "^#" /etc/bletransfer/authorized-peers | grep -q "[^[:space:]]"'
check "/etc/bletransfer/authorized-peers and /etc/default/bletransfer are conffiles" bash -c 'c=$(dpkg-query -W -f="\${Conffiles}" bletransfer); grep -q /etc/bletransfer/authorized-peers <<<"$c" && grep -q /etc/default/bletransfer <<<"$c"'
check "no role is chosen after install (BLETRANSFER_ROLE= is empty)" grep -qx 'BLETRANSFER_ROLE=' /etc/default/bletransfer

units="/lib/systemd/system/bletransfer-receiver@.service /lib/systemd/system/bletransfer-sender@.service"
check "units run /usr/bin/bletransfer" bash -c 'grep -q "^ExecStart=/usr/bin/bletransfer daemon --role receiver" /lib/systemd/system/bletransfer-receiver@.service && grep -q "^ExecStart=/usr/bin/bletransfer daemon --role sender" /lib/systemd/system/bletransfer-sender@.service && ! grep -q /usr/local $0 $1' $units
check "units check their configuration first (ExecCondition=)" bash -c 'grep -qx "ExecCondition=/usr/libexec/bletransfer/check-configuration receiver" /lib/systemd/system/bletransfer-receiver@.service && grep -qx "ExecCondition=/usr/libexec/bletransfer/check-configuration sender" /lib/systemd/system/bletransfer-sender@.service'
check "units have an [Install] section (WantedBy=multi-user.target)" bash -c 'for u in $0 $1; do sed -n "/^\[Install\]/,\$p" $u | grep -qx "WantedBy=multi-user.target" || exit 1; done' $units
check "systemd-analyze verify accepts the units" bash -c 'out=$(systemd-analyze verify bletransfer-receiver@hci0.service bletransfer-sender@hci1.service 2>&1); echo "$out"; [ -z "$out" ]'
check "udev rule asks for both roles' units per controller" grep -q 'ENV{SYSTEMD_WANTS}+="bletransfer-receiver@%k.service bletransfer-sender@%k.service"' /lib/udev/rules.d/70-bletransfer.rules

# The units' ExecCondition=, as systemd runs it: as the service user, with the variables of
# EnvironmentFile=/etc/default/bletransfer. Prints "STATUS LINES FIRST-LINE".
condition() { # role
  local err status
  err=$(runuser -u bletransfer -- env -i PATH=/usr/bin:/bin sh -c 'set -a; . /etc/default/bletransfer; set +a; exec /usr/libexec/bletransfer/check-configuration "$0"' "$1" 2>&1 >/dev/null)
  status=$?
  echo "$status $(printf '%s' "$err" | grep -c .) $(printf '%s' "$err" | head -n 1)"
}
result=$(condition receiver)
check "unconfigured: the receiver unit is skipped (1), one line: ${result#* * }" bash -c '[[ "$1" == "1 1 not started: no role chosen; put BLETRANSFER_ROLE=receiver or BLETRANSFER_ROLE=sender in /etc/default/bletransfer"* ]]' _ "$result"
result=$(condition sender)
check "unconfigured: the sender unit is skipped (1), one line" bash -c '[[ "$1" == "1 1 not started: no role chosen;"* ]]' _ "$result"
# The daemon as the unit starts it (service user, default paths), for at most 8 s: one that
# started keeps waiting for Bluetooth until timeout's SIGTERM (status 124).
run_daemon() {
  runuser -u bletransfer -- timeout -s TERM 8 /usr/bin/bletransfer daemon --role receiver --adapter hci0 \
    --output-dir /var/lib/bletransfer/inbox >/dev/null 2>/tmp/daemon.err </dev/null
  echo $?
}
status=$(run_daemon)
check "unconfigured, the daemon itself would refuse to start: status 78 ($status), one line ($(head -n 1 /tmp/daemon.err))" \
  bash -c '[ "$1" = 78 ] && [ "$(wc -l < /tmp/daemon.err)" -eq 1 ] && grep -q authorized-peers /tmp/daemon.err' _ "$status"

# Configure: the role in one line...
sed -i 's/^BLETRANSFER_ROLE=.*/BLETRANSFER_ROLE=receiver/' /etc/default/bletransfer
result=$(condition receiver)
check "role chosen, no peer yet: the receiver is skipped, one line: ${result#* * }" bash -c '[[ "$1" == "1 1 not started: /etc/bletransfer/authorized-peers lists no peer;"* ]]' _ "$result"
# ... and the peer in another.
bletransfer keygen --identity /tmp/peer-identity --name peer@test >/dev/null 2>&1
bletransfer id --identity /tmp/peer-identity | head -n 1 >> /etc/bletransfer/authorized-peers
result=$(condition receiver)
check "configured: the receiver's condition passes (0, silent)" test "$result" = "0 0 "
result=$(condition sender)
check "configured as receiver: the sender is skipped, one line: ${result#* * }" bash -c '[[ "$1" == "1 1 not started: this host'"'"'s role is receiver"* ]]' _ "$result"
status=$(run_daemon)
check "configured: the daemon starts and runs until stopped (status $status)" bash -c '[ "$1" = 124 ]' _ "$status"

# Each man page lists exactly the long options its command's --help lists.
# A formatter may break a line after the hyphen inside an option named in prose
# ("--insecure-any-" / "peer"): such lines are joined first.
long_options() { sed -e ':a' -e '/[a-z]-$/N' -e 's/-\n[[:space:]]*/-/' -e 'ta' | grep -oE -- '--[a-z][a-z0-9-]+' | grep -vx -- '--generate-completion-script' | sort -u; }
for command in "" send receive status daemon pair; do
  page=bletransfer${command:+-$command}
  help_opts=$(/usr/bin/bletransfer $command --help 2>&1 | long_options)
  man_opts=$(MANPAGER=cat MANWIDTH=200 man "$page" 2>&1 | col -b | long_options)
  check "man $page lists the options of 'bletransfer $command --help' ($(wc -w <<<"$help_opts") options)" \
    bash -c '[ -n "$1" ] && diff <(echo "$1") <(echo "$2")' _ "$help_opts" "$man_opts"
done
check "man bletransfer names its subcommands' pages" bash -c 'MANPAGER=cat man bletransfer 2>/dev/null | col -b | grep -q "bletransfer-send(1)"'

# bash: "bletransfer <TAB>" offers the subcommands, "bletransfer send --ti<TAB>" the option.
complete_words() { # words… (the last one is being completed)
  bash --norc --noprofile -c '
    [ -f /usr/share/bash-completion/bash_completion ] && . /usr/share/bash-completion/bash_completion
    . /usr/share/bash-completion/completions/bletransfer
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    fn=$(complete -p bletransfer | sed -E "s/.*-F ([^ ]+).*/\1/")
    "$fn" bletransfer "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf "%s\n" "${COMPREPLY[@]}"' _ "$@"
}
subcommands=$(complete_words bletransfer "" | sort | tr '\n' ' ')
check "bash completes 'bletransfer <TAB>' ($subcommands)" bash -c 'for s in send receive status daemon; do grep -qw "$s" <<<"$1" || exit 1; done' _ "$subcommands"
check "bash completes 'bletransfer send --ti<TAB>'" bash -c '[ "$1" = "--timeout" ]' _ "$(complete_words bletransfer send --ti)"
check "zsh and fish completions installed" test -s /usr/share/zsh/vendor-completions/_bletransfer -a -s /usr/share/fish/vendor_completions.d/bletransfer.fish

# What the daemons would have left: a received message, the resume spool (StateDirectory=).
runuser -u bletransfer -- sh -c 'echo hello > /var/lib/bletransfer/inbox/message-20260101-120000.000-0001.txt'
install -d -o bletransfer -g bletransfer -m 0700 /var/lib/bletransfer/spool
echo "BLETRANSFER_OPTIONS=--verbose" >> /etc/default/bletransfer
out=$(dpkg -r bletransfer 2>&1) && ok "dpkg -r removes the package" || fail "dpkg -r removes the package" "$out"
check "remove: binary, units, rule, condition, man pages gone" bash -c '! ls /usr/bin/bletransfer /lib/systemd/system/bletransfer-receiver@.service /lib/udev/rules.d/70-bletransfer.rules /usr/libexec/bletransfer /usr/share/man/man1/bletransfer.1.gz 2>/dev/null | grep -q .'
check "remove: changed configuration, user and data stay" bash -c 'grep -q -- --verbose /etc/default/bletransfer && grep -qx BLETRANSFER_ROLE=receiver /etc/default/bletransfer && getent passwd bletransfer && test -s /var/lib/bletransfer/inbox/message-20260101-120000.000-0001.txt'
check "remove: the authorized peers and the identity stay" bash -c 'grep -q "^bletransfer-x25519 .* peer@test$" /etc/bletransfer/authorized-peers && test -f /var/lib/bletransfer/identity'

out=$(dpkg -P bletransfer 2>&1) && ok "dpkg -P purges the package" || fail "dpkg -P purges the package" "$out"
echo "$out" | grep '^bletransfer:' | sed 's/^/     dpkg -P: /'
check "purge: configuration gone (/etc/default/bletransfer, /etc/bletransfer)" bash -c '! ls -d /etc/default/bletransfer /etc/bletransfer 2>/dev/null | grep -q .'
check "purge: the identity (private key), the spool and the empty outbox are gone" bash -c '! ls -d /var/lib/bletransfer/identity /var/lib/bletransfer/spool /var/lib/bletransfer/outbox 2>/dev/null | grep -q .'
check "purge: the received file stays, owned by the user" bash -c '[ "$(stat -c %U /var/lib/bletransfer/inbox/message-20260101-120000.000-0001.txt)" = bletransfer ] && grep -qx hello /var/lib/bletransfer/inbox/message-20260101-120000.000-0001.txt'
check "purge: says where received files remain" grep -q '^bletransfer: kept /var/lib/bletransfer/inbox (1 files' <<<"$out"
check "purge: the system user and group stay (Debian policy), and say so" bash -c 'getent passwd bletransfer && getent group bletransfer && grep -q "^bletransfer: kept the system user" <<<"$1"' _ "$out"
check "purge: the user database differs from before only by the user's own lines" bash -c 'for f in passwd group shadow gshadow; do diff <(grep -v "^bletransfer:" /tmp/$f.before) <(grep -v "^bletransfer:" /etc/$f) || exit 1; done'
snapshot > /tmp/after
# Apart from the kept user (its database lines) and the kept data (/var/lib/bletransfer, checked above).
kept() { grep -vE '^/var/lib/bletransfer[/ ]|^[0-9a-f]{32}  /etc/(passwd|group|shadow|gshadow)$|^/etc/(passwd|group|shadow|gshadow) '; }
check "purge: everything else under /etc, /usr, /var/lib is as before the install" diff <(kept < /tmp/before) <(kept < /tmp/after)
INSIDE

mkdir -p "$work/layers"
# The overlay: lower = this machine's root (read-only through the overlay), upper = RAM.
unshare --mount --propagation private bash -c '
  set -e
  w=$1
  mount -t tmpfs -o size=2g throwaway "$w/layers"
  mkdir -p "$w/layers/upper" "$w/layers/work" "$w/root"
  mount -t overlay overlay -o "lowerdir=/,upperdir=$w/layers/upper,workdir=$w/layers/work" "$w/root"
  mount --rbind /dev "$w/root/dev"
  mount -t proc proc "$w/root/proc"
  mount -t tmpfs tmp "$w/root/tmp"
  mount -t tmpfs run "$w/root/run"
  cp "$w/package.deb" "$w/inside.sh" "$w/expected-commit" "$w/root/tmp/"
  chroot "$w/root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 bash /tmp/inside.sh
' _ "$work" > "$work/inside.log" 2>&1 < /dev/null
cat "$work/inside.log"
passed=$((passed + $(grep -c '^ok ' "$work/inside.log")))
failed=$((failed + $(grep -c '^FAIL ' "$work/inside.log")))
grep -q '^ok   purge' "$work/inside.log" || grep -q '^FAIL purge' "$work/inside.log" ||
  { failed=$((failed + 1)); echo "FAIL the throwaway root did not run to the end (see above)"; }
echo "debian-package: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
