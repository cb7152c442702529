#!/usr/bin/env bash
# README's first command on a stock Debian 12 (bookworm) machine, as a newcomer types it.
#
#   sudo bash scripts/fresh_machine_check.sh root    # as root in the fresh root
#   sudo bash scripts/fresh_machine_check.sh user    # as a normal user who has sudo
#   FRESH_SECOND=1 sudo bash scripts/fresh_machine_check.sh root   # then README's second command too
#
# debootstrap makes a minimal Debian 12 root from Debian's archive with only python3, git and
# ca-certificates (plus sudo and a user in the 'user' mode), the committed checkout is cloned into it,
# and README's first command runs there exactly as written, in a chroot (the host's /proc, /dev and
# network). One thing is not stock, to keep CI inside its time: the host's folder of local wheels
# (/opt/wheels, holding the CPU build of torch) is mounted read-only and named in PIP_FIND_LINKS, so
# torch is not downloaded; everything else comes from PyPI and Debian's archive as on any machine.
# And where this machine reaches the registries through a TLS-inspecting proxy, its local CA
# certificates (/usr/local/share/ca-certificates) are added to the root's trust store: without them
# no HTTPS download works from the root at all; a real machine needs none of this.
# Prints each command, its exit code and its time; exits non-zero when the command failed.
set -euo pipefail

MODE=${1:-root}
[ "$MODE" = root ] || [ "$MODE" = user ] || { echo "usage: $0 root|user" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$0: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE=${FRESH_BASE:-/var/tmp/notebook-launcher-bookworm-base.tar}  # debootstrap's result, reused
ROOT=$(mktemp -d /var/tmp/notebook-launcher-fresh.XXXXXX)
chmod 755 "$ROOT"  # mktemp made it 0700: it is the chroot's /, which every user must traverse
COMMAND=$(grep -m1 -E '^bash scripts/install\.sh && ' "$REPO/README.md" | sed -E 's/[[:space:]]+# 1\..*$//')
SECOND=$(grep -m1 -E '^[^#]*[[:space:]]+# 2\. ' "$REPO/README.md" | sed -E 's/[[:space:]]+# 2\..*$//')
[ -n "$COMMAND" ] || { echo "$0: README.md has no first command ('bash scripts/install.sh && ...')" >&2; exit 2; }

mounted=()
cleanup() {  # never changes the exit status: what the command did is the result
    local pid
    for pid in /proc/[0-9]*; do  # daemons a test started inside the root (munged, slurmctld, ...)
        [[ "$(readlink "$pid/root" 2>/dev/null)" == "$ROOT"* ]] && kill -9 "${pid#/proc/}" 2>/dev/null
    done
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
    rm -rf --one-file-system "$ROOT" 2>/dev/null || true
}
trap cleanup EXIT
mount_in() { mount "$@"; mounted+=("${!#}"); }

command -v debootstrap >/dev/null || {
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq debootstrap >/dev/null
}
start=$SECONDS
if [ -s "$BASE" ]; then
    tar -C "$ROOT" -xf "$BASE"
    echo "fresh_machine_check: Debian 12 root from $BASE (made earlier by debootstrap)"
else
    debootstrap --variant=minbase --include=python3,git,ca-certificates bookworm "$ROOT" "$MIRROR" >/dev/null
    tar -C "$ROOT" -cf "$BASE" .
    echo "fresh_machine_check: debootstrap of Debian 12 took $((SECONDS - start)) s"
fi
chmod 755 "$ROOT"  # again: the root's own mode as the archive recorded it
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# What Debian's installer writes and debootstrap does not: without it "localhost" resolves nowhere
[ -e "$ROOT/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(hostname)" >"$ROOT/etc/hosts"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
    chroot "$ROOT" update-ca-certificates >/dev/null 2>&1
fi
mount_in -t proc proc "$ROOT/proc"
mount_in --rbind /sys "$ROOT/sys"
mount_in --rbind /dev "$ROOT/dev"
mkdir -p "$ROOT/dev/shm" "$ROOT/opt/wheels"
if [ -d /opt/wheels ]; then
    mount_in --bind -o ro /opt/wheels "$ROOT/opt/wheels"
fi
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 HOME=/root "$@"; }

echo "fresh_machine_check: $(in_root python3 --version), $(in_root git --version); pip: $(in_root python3 -m pip --version 2>&1 | head -1)"
if [ "$MODE" = user ]; then
    in_root bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo >/dev/null
        useradd -m -s /bin/bash newcomer && echo "newcomer ALL=(ALL) NOPASSWD:ALL" >/etc/sudoers.d/newcomer'
    HOME_DIR=/home/newcomer
else
    HOME_DIR=/root
fi
git clone -q "$REPO" "$ROOT$HOME_DIR/notebook_launcher"
[ "$MODE" = user ] && in_root chown -R newcomer:newcomer "$HOME_DIR/notebook_launcher"

echo "fresh_machine_check ($MODE): \$ $COMMAND"
run="cd ~/notebook_launcher && export PIP_FIND_LINKS=/opt/wheels && $COMMAND"
start=$SECONDS status=0
if [ "$MODE" = user ]; then
    chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        su - newcomer -c "$run" || status=$?
else
    in_root bash -lc "$run" || status=$?
fi
echo "fresh_machine_check ($MODE): exit $status after $((SECONDS - start)) s; venv $(du -sh "$ROOT$HOME_DIR/notebook_launcher/.venv" 2>/dev/null | cut -f1)"
if [ "$status" = 0 ] && [ -n "${FRESH_SECOND:-}" ]; then
    echo "fresh_machine_check ($MODE): \$ $SECOND"
    run2="cd ~/notebook_launcher && export PIP_FIND_LINKS=/opt/wheels && $SECOND"  # the wheel test's venv too
    start=$SECONDS
    if [ "$MODE" = user ]; then
        chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 su - newcomer -c "$run2" || status=$?
    else
        in_root bash -lc "$run2" || status=$?
    fi
    echo "fresh_machine_check ($MODE): second command exit $status after $((SECONDS - start)) s"
fi
exit "$status"
