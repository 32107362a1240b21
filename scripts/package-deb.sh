#!/usr/bin/env bash
# Builds the Debian package bletransfer_<version>_amd64.deb and prints its path (last line).
#
#   scripts/package-deb.sh [--output-dir DIR] [--scratch-path DIR] [--no-lintian]
#
#   --output-dir    where the .deb goes (default: .build-deb/dist)
#   --scratch-path  SwiftPM scratch directory of the release build (default: .build-deb)
#   --no-lintian    do not check the package with lintian
#   DEB_MAINTAINER  "Name <address>" for the Maintainer field (default: a placeholder)
#
# The binary is a release build with the Swift standard library linked in statically, so the
# target needs no Swift. Man pages (bletransfer(1), bletransfer-<subcommand>(1)) are generated
# from the argument-parser definitions by swift-argument-parser's generate-manual tool, and the
# bash, zsh and fish completions by the binary itself, so neither can drift from --help. The
# units, udev rule and docs come from udev/ and docs/ as they are; only the binary's path is
# rewritten (/usr/local/bin → /usr/bin). /etc/bletransfer/authorized-peers (comments only, from
# udev/authorized-peers) is a conffile; the postinst creates the service's identity. The D-Bus policy is packaged if udev/bletransfer-dbus.conf
# exists; without it the daemons reach BlueZ as members of the group "bluetooth" (sysusers.d).
# Maintainer scripts and the sysusers.d/tmpfiles.d files are in scripts/deb/.
#
# Run as root on a fresh Debian 12 it installs what it needs (build headers, dpkg-dev,
# lintian) with apt; Swift 6.1 or newer must be on the PATH or at /opt/swift.
# Exit statuses: 0 built, 64 usage, 69 a needed tool is missing, 70 a build step failed,
# 65 lintian reported a tag not explained below.
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
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" 64 ;;
  esac
done
mkdir -p "$out_dir" "$scratch"
out_dir=$(cd "$out_dir" && pwd)
scratch=$(cd "$scratch" && pwd)

# ---- tools -------------------------------------------------------------------------------
# The C headers the build links against (as scripts/setup.sh installs them), dpkg-shlibdeps.
needed_packages=(pkg-config libdbus-1-dev libbluetooth-dev dpkg-dev binutils)
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

version=$(sed -nE 's/^ *static let number = "([^"]+)".*/\1/p' Sources/bletransfer/Version.swift)
[ -n "$version" ] || die "no version number in Sources/bletransfer/Version.swift"
package=bletransfer
maintainer=${DEB_MAINTAINER:-bletransfer developers <bletransfer@localhost>}
deb="$out_dir/${package}_${version}_amd64.deb"

# ---- binary ------------------------------------------------------------------------------
note "release build with the static Swift standard library (in $scratch)"
swift build -c release --static-swift-stdlib --product bletransfer --scratch-path "$scratch" >&2 ||
  die "swift build failed (see above)"
binary="$scratch/release/bletransfer"
if ldd "$binary" | grep -q 'libswift\|libFoundation\|libdispatch'; then
  die "$binary still loads Swift libraries: $(ldd "$binary" | grep -o 'lib\(swift\|Foundation\|dispatch\)[^ ]*' | tr '\n' ' ')"
fi

note "generate-manual (swift-argument-parser)"
parser_dir="$scratch/checkouts/swift-argument-parser"
[ -d "$parser_dir" ] || die "no swift-argument-parser checkout in $scratch/checkouts"
# Its own package, built in a scratch directory of its own so the checkout stays untouched.
swift build -c release --package-path "$parser_dir" --scratch-path "$scratch/generate-manual" \
  --product generate-manual >&2 || die "building generate-manual failed (see above)"
generate_manual="$scratch/generate-manual/release/generate-manual"

# ---- tree --------------------------------------------------------------------------------
stage=$(mktemp -d "$scratch/deb-root.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
d() { install -d -m 0755 "$stage/$1"; }
d DEBIAN; d usr/bin; d usr/share/man/man1; d usr/share/doc/$package
d usr/lib/systemd/system; d usr/lib/udev/rules.d; d usr/lib/sysusers.d; d usr/lib/tmpfiles.d
d etc/default; d etc/bletransfer; d usr/share/bash-completion/completions; d usr/share/zsh/vendor-completions
d usr/share/fish/vendor_completions.d

install -m 0755 "$binary" "$stage/usr/bin/bletransfer"
# Debug symbols stay in the build tree; the package carries the stripped binary.
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage/usr/bin/bletransfer"
"$stage/usr/bin/bletransfer" --version >/dev/null || die "the stripped binary does not run"

# Man pages: one per command; generate-manual names them bletransfer.send.1, Debian's
# convention (and `man bletransfer-send`) wants bletransfer-send.1.
man_tmp="$stage.man"
rm -rf "$man_tmp"; mkdir -p "$man_tmp"
"$generate_manual" "$stage/usr/bin/bletransfer" --multi-page --section 1 \
  --output-directory "$man_tmp" >&2 || die "generate-manual failed"
for page in "$man_tmp"/*.1; do
  name=$(basename "$page" .1)
  dashed=${name//./-}
  # whatis and `man bletransfer-send` want the page's file name in NAME; the synopsis keeps
  # the command as typed ("bletransfer send"). Cross references and the title follow the
  # file names; blank lines (paragraphs of --help's discussion) become .Pp for groff.
  awk -v dashed="$dashed" '
    /^\.Nm "/ && !named { command = substr($0, 5); print ".Nm " dashed; named = 1; next }
    /^\.Nm$/ && command != "" { print ".Nm " command; next }
    /^\.Xr bletransfer\./ { sub(/^\.Xr bletransfer\./, ".Xr bletransfer-"); gsub(/\./, "-", $2) }
    /^\.Dt BLETRANSFER\./ { sub(/^\.Dt BLETRANSFER\./, ".Dt BLETRANSFER-") }
    /^$/ { print ".Pp"; next }
    { print }' "$page" | gzip -9n > "$stage/usr/share/man/man1/$dashed.1.gz"
done
rm -rf "$man_tmp"
[ -f "$stage/usr/share/man/man1/bletransfer.1.gz" ] || die "generate-manual made no bletransfer(1)"

for shell in bash zsh fish; do
  case $shell in
    bash) dest=usr/share/bash-completion/completions/bletransfer ;;
    zsh) dest=usr/share/zsh/vendor-completions/_bletransfer ;;
    fish) dest=usr/share/fish/vendor_completions.d/bletransfer.fish ;;
  esac
  "$stage/usr/bin/bletransfer" --generate-completion-script "$shell" > "$stage/$dest" ||
    die "no $shell completion script"
  # Completion files are sourced, not run: no #! line.
  sed -i '1{/^#!/d}' "$stage/$dest"
  chmod 0644 "$stage/$dest"
done

# Units and rule from udev/ as they are, with the packaged paths.
for unit in udev/bletransfer-*@.service; do
  sed -e 's|/usr/local/bin/bletransfer|/usr/bin/bletransfer|g' \
      -e 's|/usr/local/share/doc/bletransfer|/usr/share/doc/bletransfer|g' \
      "$unit" > "$stage/usr/lib/systemd/system/$(basename "$unit")"
done
sed -e 's|^# scripts/install-service.sh --role sender installs this file with "sender" in place of$|# To start senders instead, copy this file to /etc/udev/rules.d/ and put "sender" in place of|' \
    udev/70-bletransfer.rules > "$stage/usr/lib/udev/rules.d/70-bletransfer.rules"
install -m 0644 scripts/deb/sysusers.conf "$stage/usr/lib/sysusers.d/bletransfer.conf"
install -m 0644 scripts/deb/tmpfiles.conf "$stage/usr/lib/tmpfiles.d/bletransfer.conf"
install -m 0644 scripts/deb/default "$stage/etc/default/bletransfer"
install -m 0644 udev/authorized-peers "$stage/etc/bletransfer/authorized-peers"
if [ -f udev/bletransfer-dbus.conf ]; then
  d usr/share/dbus-1/system.d
  install -m 0644 udev/bletransfer-dbus.conf "$stage/usr/share/dbus-1/system.d/bletransfer.conf"
fi

doc="$stage/usr/share/doc/$package"
install -m 0644 README.md docs/unattended.md scripts/deb/copyright "$doc/"
# A native package's changelog: this version and the commit it was built from.
commit=$("$stage/usr/bin/bletransfer" --version | sed -nE 's/.*\(commit ([^)]*)\).*/\1/p')
{
  echo "$package ($version) unstable; urgency=medium"
  echo
  echo "  * Built from commit ${commit:-unknown}."
  echo
  echo " -- $maintainer  $(date -R -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n > "$doc/changelog.gz"

install -m 0755 scripts/deb/postinst scripts/deb/prerm scripts/deb/postrm "$stage/DEBIAN/"
printf '%s\n' /etc/default/bletransfer /etc/bletransfer/authorized-peers > "$stage/DEBIAN/conffiles"
chmod 0644 "$stage/DEBIAN/conffiles"
find "$stage/usr" "$stage/etc" -type f ! -path "$stage/usr/bin/*" -exec chmod 0644 {} +

# Libraries the binary loads → package dependencies, as dpkg-shlibdeps sees them.
shlib_dir=$(mktemp -d "$scratch/shlibdeps.XXXXXX")
mkdir -p "$shlib_dir/debian"
printf 'Source: %s\n\nPackage: %s\nArchitecture: amd64\n' "$package" "$package" > "$shlib_dir/debian/control"
shlib_depends=$(cd "$shlib_dir" && dpkg-shlibdeps -O -e"$stage/usr/bin/bletransfer" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p') || true
rm -rf "$shlib_dir"
[ -n "$shlib_depends" ] || die "dpkg-shlibdeps found no dependencies of the binary"

installed_size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<EOF
Package: $package
Version: $version
Architecture: amd64
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $shlib_depends, bluez, dbus, systemd
Section: net
Priority: optional
Description: move text and files between two hosts over Bluetooth Low Energy
 A sender (GATT peripheral) advertises a transfer service and notifies the
 message; a receiver (central) scans, connects, subscribes and reassembles it.
 Both talk to bluetoothd over D-Bus. Works with the CoreBluetooth "BTLE
 Transfer" sample on iOS and macOS, and between two bletransfer hosts with a
 framed, acknowledged format.
 .
 udev starts a receiver daemon for every Bluetooth controller as it appears
 (bletransfer-receiver@.service). The daemons exchange messages only with the
 peers whose public keys are listed in /etc/bletransfer/authorized-peers,
 authenticated and encrypted; see /usr/share/doc/bletransfer/unattended.md.
EOF

rm -f "$deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >&2 || die "dpkg-deb failed"

# ---- lintian -----------------------------------------------------------------------------
# Tags that remain, each for a reason:
explained_tags=(
  # The project has no mailing address yet: set DEB_MAINTAINER="Name <address>" to publish.
  bogus-mail-host bogus-mail-host-in-debian-changelog
  # The project states no license yet; the copyright file says so and names the licenses of
  # the parts linked in statically.
  copyright-without-copyright-notice
  # The daemons are instances of template units started by udev per controller, never enabled,
  # so deb-systemd-invoke (which acts on enabled units) is not the tool: stopping them before
  # removal and restarting them on upgrade is done with systemctl, only when systemd runs.
  maintainer-script-calls-systemctl
)
if [ "$run_lintian" -eq 1 ]; then
  note "lintian"
  lintian_out=$(lintian --tag-display-limit 0 "$deb" 2>&1 | grep -v '^running with root privileges' || true)
  unexplained=$(grep -E '^[EWIP]: ' <<<"$lintian_out" | while read -r line; do
    tag=$(awk '{print $3}' <<<"$line")
    printf '%s\n' "${explained_tags[@]}" | grep -qx -- "$tag" || echo "$line"
  done)
  if [ -n "$lintian_out" ]; then note "lintian says (explained tags are accepted):"; echo "$lintian_out" >&2; fi
  [ -z "$unexplained" ] || die "lintian tags not explained in scripts/package-deb.sh: $(tr '\n' ';' <<<"$unexplained")" 65
fi

echo "$deb"
