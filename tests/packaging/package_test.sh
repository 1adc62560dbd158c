#!/usr/bin/env bash
# Builds the Debian package with CPack, unpacks it into a throwaway root, and checks what a user
# gets: hpctl runs from there, the man pages, bash completion, copyright and changelog are
# installed, the service's files and maintainer scripts are there when the tree has them, Depends
# names the runtime libraries, and lintian reports no errors.
# Usage: package_test.sh BUILD_DIR
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/out/*.deb)
echo "package: $(basename "$deb")"

fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}

depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libc6 libelf1 libdw1 libzstd1 libbpf1; do
  check "Depends names $lib" grep -q "$lib" <<<"$depends"
done
for lib in libdebuginfod1 libcurl4 libcapstone4; do
  check "Recommends names $lib (loaded with dlopen)" grep -q "$lib" <<<"$(dpkg-deb -f "$deb" Recommends)"
done
check "package name is hpd" test "$(dpkg-deb -f "$deb" Package)" = hpd
check "Section is devel, Priority optional" \
  test "$(dpkg-deb -f "$deb" Section) $(dpkg-deb -f "$deb" Priority)" = "devel optional"

root="$work/root"
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$work/control"
check "hpctl is installed in /usr/bin" test -x "$root/usr/bin/hpctl"
check "hpctl --version runs from the unpacked root" \
  sh -c "'$root/usr/bin/hpctl' --version | grep -q '^hpctl [0-9]'"
check "hpctl is stripped" sh -c "! readelf -S '$root/usr/bin/hpctl' | grep -q '\.debug_info'"

# Every man page of the source tree, compressed, and each renders.
for page in "$src"/man/*.[1-8]; do
  name=$(basename "$page")
  installed="$root/usr/share/man/man${name##*.}/$name.gz"
  check "$name is installed, gzip-compressed" test -f "$installed"
  check "the installed $name renders" sh -c "zcat '$installed' | mandoc -T utf8 >/dev/null"
done

completion="$root/usr/share/bash-completion/completions/hpctl"
check "bash completion is installed" test -f "$completion"
check "the installed completion completes 'hpctl rec' to record" sh -c "bash --norc --noprofile -c '
  source \"$completion\"; COMP_WORDS=(\"$root/usr/bin/hpctl\" rec); COMP_CWORD=1; _hpctl
  [ \"\${COMPREPLY[*]}\" = record ]'"
check "copyright is in /usr/share/doc/hpd" test -f "$root/usr/share/doc/hpd/copyright"
check "changelog.gz is in /usr/share/doc/hpd" sh -c "zcat '$root/usr/share/doc/hpd/changelog.gz' | head -1 | grep -q '^hpd ('"
check "lintian overrides are installed" test -f "$root/usr/share/lintian/overrides/hpd"

# The service, once packaging/systemd has it.
systemd_src="$src/packaging/systemd"
if [ -f "$systemd_src/hpd.service" ]; then
  check "hpd is installed in /usr/sbin" test -x "$root/usr/sbin/hpd"
  for unit in hpd.service hpd.socket; do
    check "$unit is installed" sh -c "find '$root' -path '*/systemd/system/$unit' | grep -q ."
  done
fi
if [ -f "$systemd_src/hpd.sysusers" ]; then
  check "the sysusers.d entry is installed" test -f "$root/usr/lib/sysusers.d/hpd.conf"
fi
if [ -f "$systemd_src/hpd.tmpfiles" ]; then
  check "the tmpfiles.d entry is installed" test -f "$root/usr/lib/tmpfiles.d/hpd.conf"
fi
if [ -f "$systemd_src/hpd.conf" ]; then
  check "/etc/hpd/hpd.conf is installed" cmp -s "$systemd_src/hpd.conf" "$root/etc/hpd/hpd.conf"
  check "/etc/hpd/hpd.conf is a conffile" grep -qx /etc/hpd/hpd.conf "$work/control/conffiles"
fi
if [ -f "$systemd_src/hpd.socket" ]; then
  for script in postinst prerm postrm; do
    check "$script is in the package and parses" sh -n "$work/control/$script"
  done
fi
check "nothing is installed outside /usr and /etc" \
  sh -c "cd '$root' && test -z \"\$(find . -mindepth 1 -maxdepth 1 ! -name usr ! -name etc)\""

# lintian: errors fail the test; warnings are printed for a human to judge. Intended tags are
# overridden, with the reason, in packaging/debian/lintian-overrides (shipped in the package).
if command -v lintian >/dev/null; then
  lintian_status=0
  lintian --fail-on error --display-info "$deb" >"$work/lintian.log" 2>&1 || lintian_status=$?
  sed 's/^/lintian: /' "$work/lintian.log"
  check "lintian reports no errors" test "$lintian_status" -eq 0
else
  echo "FAILED: lintian is not installed (packaging/install-deps.sh installs it)"
  fail=1
fi

if [ "$fail" -ne 0 ]; then
  echo "package test: FAILED"
  exit 1
fi
echo "package test: all checks passed"
