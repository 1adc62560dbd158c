#!/usr/bin/env bash
# Builds the Debian package with CPack, unpacks it into a throwaway root, and checks what a user
# gets: hpctl runs from there, the man page is installed, Depends names the runtime libraries.
# Usage: package_test.sh BUILD_DIR
set -euo pipefail
build=$1
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
check "package name is hpd" test "$(dpkg-deb -f "$deb" Package)" = hpd

root="$work/root"
dpkg-deb -x "$deb" "$root"
check "hpctl is installed in /usr/bin" test -x "$root/usr/bin/hpctl"
check "hpctl(1) is installed, gzip-compressed" test -f "$root/usr/share/man/man1/hpctl.1.gz"
check "hpctl --version runs from the unpacked root" \
  sh -c "'$root/usr/bin/hpctl' --version | grep -q '^hpctl [0-9]'"
check "the installed man page renders" sh -c "zcat '$root/usr/share/man/man1/hpctl.1.gz' | mandoc -T utf8 >/dev/null"
check "nothing is installed outside /usr" sh -c "cd '$root' && test -z \"\$(find . -mindepth 1 -maxdepth 1 ! -name usr)\""

if [ "$fail" -ne 0 ]; then
  echo "package test: FAILED"
  exit 1
fi
echo "package test: all checks passed"
