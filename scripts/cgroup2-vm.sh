#!/usr/bin/env bash
# The local executor's cgroup v2 path on a real kernel. This machine's cgroup tree is
# v1 (memory and cpu are bound there), so this boots Debian's kernel under QEMU with an
# initramfs holding busybox and qanat-jobs' unit-test binary, mounts the v2 hierarchy
# (the only one) as the VM's init, puts the test in a cgroup of its own that holds
# processes (as a service is), and runs the one test that needs it:
# `cgroup::tests::cgroup_v2_limits_kills_and_sweeps_on_a_real_kernel` (memory.max,
# swap off, oom.group, cpu.max, a process over its limit killed by the kernel, cgroup.kill
# reaching a process that left its session, removal and the start-up sweep).
#
# Installs Debian's qemu-system-x86, busybox-static and cpio when missing (root), and
# keeps the kernel package under $HOME/.cache/qanat-vm. QEMU runs without KVM (nested
# KVM hangs on this machine's kind): the boot takes seconds.
#
#   scripts/cgroup2-vm.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
CACHE=$HOME/.cache/qanat-vm
TEST=cgroup::tests::cgroup_v2_limits_kills_and_sweeps_on_a_real_kernel

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
if [ ${#need[@]} -gt 0 ]; then
  echo "cgroup2-vm: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
  }
fi

# Debian's current kernel (the package linux-image-amd64 depends on), once.
mkdir -p "$CACHE"
KERNEL=$(ls "$CACHE"/vmlinuz-* 2>/dev/null | head -n1 || true)
if [ -z "$KERNEL" ]; then
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
  [ -n "$pkg" ] || { apt-get update -q >/dev/null; pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}'); }
  echo "cgroup2-vm: fetching $pkg (once)" >&2
  tmp=$(mktemp -d)
  # Stale package lists (a fresh machine) are refreshed once and the download retried.
  (cd "$tmp" && { apt-get download "$pkg" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get download "$pkg" >/dev/null; }; } && dpkg-deb -x ./*.deb x)
  cp "$tmp"/x/boot/vmlinuz-* "$CACHE/"
  rm -rf "$tmp"
  KERNEL=$(ls "$CACHE"/vmlinuz-* | head -n1)
fi

# The unit-test binary of qanat-jobs.
BIN=$(cd "$ROOT" && cargo test -p qanat-jobs --lib --locked --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])' | tail -n1)
[ -x "$BIN" ] || { echo "cgroup2-vm: no test binary for qanat-jobs" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-cgroup2-vm.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
IR=$WORK/ir
mkdir -p "$IR"/{bin,proc,sys,dev,tmp,lib64}
cp /bin/busybox "$IR/bin/"
strip -o "$IR/bin/jobs-tests" "$BIN" 2>/dev/null || cp "$BIN" "$IR/bin/jobs-tests"
# Its shared libraries, at the paths it asks for.
ldd "$BIN" | awk '/=> \// {print $3} /^\t\/lib/ {print $1}' | while read -r lib; do
  mkdir -p "$IR$(dirname "$lib")" && cp -L "$lib" "$IR$lib"
done
cat >"$IR/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# A service's cgroup holding the test's process (as systemd starts a service's main
# process in its own); this shell stays in the root to report and power off.
echo "+memory +cpu" > /sys/fs/cgroup/cgroup.subtree_control
mkdir /sys/fs/cgroup/svc
echo "kernel \$(uname -r), cgroup2 controllers: \$(cat /sys/fs/cgroup/cgroup.controllers)"
HOME=/tmp TMPDIR=/tmp RUST_BACKTRACE=1 sh -c 'echo \$\$ > /sys/fs/cgroup/svc/cgroup.procs && exec /bin/jobs-tests --ignored --exact $TEST --nocapture --test-threads=1'
echo "VM-TEST-RC=\$?"
poweroff -f
EOF
chmod +x "$IR/init"
(cd "$IR" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$WORK/initrd.gz")

timeout 600 qemu-system-x86_64 -m 1024 -nographic -no-reboot -kernel "$KERNEL" \
  -initrd "$WORK/initrd.gz" -append "console=ttyS0 quiet panic=-1" </dev/null 2>&1 |
  tr -d '\r' | tee "$WORK/console.log" | grep -v '^\s*$' | grep -vE '^\[ *[0-9.]+\] ' || true
grep -q "VM-TEST-RC=0" "$WORK/console.log" && grep -q "test result: ok. 1 passed" "$WORK/console.log" || {
  echo "cgroup2-vm: the cgroup v2 test did not pass in the VM" >&2
  exit 1
}
echo "cgroup2-vm: passed"
