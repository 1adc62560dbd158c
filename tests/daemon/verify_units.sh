#!/bin/sh
# systemd-analyze verify on packaging/systemd: the units as built (ExecStart pointing at the built hpd)
# and as installed (cmake --install into a scratch root, verified with --root). Any output is a failure.
set -eu
src=$1      # packaging/systemd
hpd=$2      # the built hpd
build=$3    # the build directory, for cmake --install
work=$(mktemp -d /tmp/hpd-units-XXXXXX)
trap 'rm -rf "$work"' EXIT

fail=0
check() {
  # $1: description; the rest: the command. It must succeed and print nothing.
  what=$1; shift
  if ! out=$("$@" 2>&1) || [ -n "$out" ]; then
    echo "FAIL: $what:"; echo "$out"; fail=1
  else
    echo "ok: $what"
  fi
}

# 1. The units with the built binary.
mkdir -p "$work/built"
sed "s|^ExecStart=/usr/sbin/hpd|ExecStart=$hpd|" "$src/hpd.service" > "$work/built/hpd.service"
cp "$src/hpd.socket" "$work/built/hpd.socket"
grep -q "^ExecStart=$hpd\$" "$work/built/hpd.service" || { echo "FAIL: ExecStart not rewritten"; exit 1; }
check "verify built units" systemd-analyze verify --man=no "$work/built/hpd.socket" "$work/built/hpd.service"

# 2. The installed tree: hpd at /usr/sbin/hpd, the units in /usr/lib/systemd/system.
DESTDIR="$work/root" cmake --install "$build" --prefix /usr --component hpd >/dev/null
test -x "$work/root/usr/sbin/hpd" || { echo "FAIL: hpd not installed to /usr/sbin"; exit 1; }
test -f "$work/root/usr/lib/systemd/system/hpd.service" || { echo "FAIL: hpd.service not installed"; exit 1; }
test -f "$work/root/usr/lib/sysusers.d/hpd.conf" || { echo "FAIL: sysusers.d entry not installed"; exit 1; }
# The installed files unchanged but for the prefix of ExecStart (a scratch --root lacks sysinit.target).
mkdir -p "$work/installed"
sed "s|^ExecStart=/usr/sbin/hpd|ExecStart=$work/root/usr/sbin/hpd|" \
  "$work/root/usr/lib/systemd/system/hpd.service" > "$work/installed/hpd.service"
cp "$work/root/usr/lib/systemd/system/hpd.socket" "$work/installed/hpd.socket"
cmp -s "$src/hpd.socket" "$work/installed/hpd.socket" || { echo "FAIL: installed hpd.socket differs"; fail=1; }
check "verify installed units" systemd-analyze verify --man=no "$work/installed/hpd.socket" "$work/installed/hpd.service"

# 3. The sysusers.d entry creates the hpd group.
if command -v systemd-sysusers >/dev/null; then
  mkdir -p "$work/sysroot/etc"
  : > "$work/sysroot/etc/passwd"; : > "$work/sysroot/etc/group"
  : > "$work/sysroot/etc/shadow"; : > "$work/sysroot/etc/gshadow"
  systemd-sysusers --root="$work/sysroot" "$src/hpd.sysusers" >/dev/null
  grep -q '^hpd:' "$work/sysroot/etc/group" || { echo "FAIL: sysusers did not create group hpd"; fail=1; }
  echo "ok: sysusers creates group hpd"
fi

# 4. The hardening the issue asks for is there.
for key in Type=notify WatchdogSec= NoNewPrivileges=yes ProtectSystem=strict ProtectHome=read-only PrivateTmp=yes \
           RuntimeDirectory=hpd StateDirectory=hpd ConfigurationDirectory=hpd CapabilityBoundingSet=; do
  grep -q "^$key" "$src/hpd.service" || { echo "FAIL: hpd.service lacks $key"; fail=1; }
done
grep -q '^SocketMode=0666' "$src/hpd.socket" || { echo "FAIL: hpd.socket lacks SocketMode=0666"; fail=1; }
grep -q '^ListenStream=/run/hpd/hpd.sock' "$src/hpd.socket" || { echo "FAIL: hpd.socket path"; fail=1; }
exit $fail
