#!/usr/bin/env bash
# Builds the Debian package bletransfer_<version>_amd64.deb the Debian way, with
# dpkg-buildpackage -us -uc -b and the debhelper rules in debian/, checks it with lintian, and
# prints its path (last line).
#
#   scripts/package-deb.sh [--output-dir DIR] [--scratch-path DIR] [--no-lintian]
#
#   --output-dir    where the .deb, .buildinfo and .changes go (default: .build-deb/dist)
#   --scratch-path  SwiftPM scratch directory of the release build (default: .build-deb); the
#                   lab runs its release/bletransfer
#   --no-lintian    do not check the package with lintian
#
# What the package holds and how it is made is in debian/ (rules, control, the maintainer
# scripts); the units, udev rule and D-Bus policy come from udev/, shared with
# scripts/install-service.sh. The version is debian/changelog's, which must match
# Sources/bletransfer/Version.swift. Nothing is written outside the output and scratch
# directories (dpkg-buildpackage's default would be the parent directory).
#
# Run as root on a fresh Debian 12 it installs what it needs (build headers, dpkg-dev,
# debhelper, lintian) with apt; Swift 6.1 or newer must be on the PATH or at /opt/swift.
# Exit statuses: 0 built, 64 usage, 69 a needed tool is missing, 70 a build step failed,
# 65 lintian reported an error or a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export PATH="/opt/swift/usr/bin:$PATH"

out_dir="$repo/.build-deb/dist"
scratch="$repo/.build-deb"
run_lintian=1
die() { echo "package-deb: $1" >&2; exit "${2:-70}"; }
note() { echo "package-deb: $*" >&2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --output-dir) [ $# -ge 2 ] || die "--output-dir needs a directory" 64; out_dir=$2; shift 2 ;;
    --scratch-path) [ $# -ge 2 ] || die "--scratch-path needs a directory" 64; scratch=$2; shift 2 ;;
    --no-lintian) run_lintian=0; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" 64 ;;
  esac
done
mkdir -p "$out_dir" "$scratch"
out_dir=$(cd "$out_dir" && pwd)
scratch=$(cd "$scratch" && pwd)

# ---- tools -------------------------------------------------------------------------------
# debian/control's Build-Depends (dpkg-buildpackage checks them) and build-essential, which
# it requires implicitly.
needed_packages=(build-essential dpkg-dev debhelper pkg-config libdbus-1-dev libbluetooth-dev git)
[ "$run_lintian" -eq 1 ] && needed_packages+=(lintian)
missing=()
for p in "${needed_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "needs ${missing[*]}: apt-get install ${missing[*]} (or run as root)" 69
  note "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v swift >/dev/null || die "swift not found (Swift 6.1 or newer, e.g. /opt/swift/usr/bin)" 69
[ "$(dpkg --print-architecture)" = amd64 ] || die "builds amd64 packages only, this is $(dpkg --print-architecture)" 69

version=$(dpkg-parsechangelog -S Version)
program_version=$(sed -nE 's/^ *static let number = "([^"]+)".*/\1/p' Sources/bletransfer/Version.swift)
[ "$version" = "$program_version" ] ||
  die "debian/changelog is at $version, Sources/bletransfer/Version.swift at $program_version: add a changelog entry (dch -v $program_version)"
deb="$out_dir/bletransfer_${version}_amd64.deb"

# ---- dpkg-buildpackage -------------------------------------------------------------------
note "dpkg-buildpackage -us -uc -b (release build in $scratch)"
rm -f "$deb" "$out_dir/bletransfer_${version}_amd64.buildinfo" "$out_dir/bletransfer_${version}_amd64.changes"
BLETRANSFER_SCRATCH="$scratch" BLETRANSFER_DEB_DESTDIR="$out_dir" \
  dpkg-buildpackage -us -uc -b \
    --buildinfo-file="$out_dir/bletransfer_${version}_amd64.buildinfo" --buildinfo-option=-u"$out_dir" \
    --changes-file="$out_dir/bletransfer_${version}_amd64.changes" --changes-option=-u"$out_dir" >&2 ||
  die "dpkg-buildpackage failed (see above)"
[ -f "$deb" ] || die "dpkg-buildpackage made no $deb"
# What the build left under debian/ (the package tree, generated pages) goes; the scratch
# directory stays for the next build.
debian/rules clean >/dev/null 2>&1 || true

# ---- lintian -----------------------------------------------------------------------------
# On the .changes, which covers the .deb and the .buildinfo. No error or warning is accepted,
# and there are no overrides. Informational tags (I:) are shown, not failed on: those left are
# about the statically linked Swift runtime and libraries, not this project's code -
# spelling-error-in-binary (strings of Foundation's and BoringSSL's tables),
# hardening-no-fortify-functions (the toolchain's prebuilt runtime) and hardening-no-bindnow
# (SwiftPM's default link).
if [ "$run_lintian" -eq 1 ]; then
  note "lintian"
  lintian_out=$(lintian --display-info --tag-display-limit 0 "$out_dir/bletransfer_${version}_amd64.changes" 2>&1 |
    grep -v '^running with root privileges' || true)
  if grep -qE '^[EWX]: ' <<<"$lintian_out"; then
    note "lintian says:"; echo "$lintian_out" >&2
    die "lintian reported errors or warnings" 65
  fi
  info_tags=$(grep -E '^I: ' <<<"$lintian_out" | awk '{print $3}' | sort | uniq -c | awk '{printf "%s%s (%d)", sep, $2, $1; sep=", "}')
  note "lintian: no errors, no warnings${info_tags:+; informational: $info_tags}"
fi

echo "$deb"
