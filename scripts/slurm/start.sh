#!/usr/bin/env bash
# A real single-node SLURM on this machine, for the tests, the example notebook and trying things out:
# Debian's munge, slurmctld and slurmd, one node with this machine's CPUs (2 here), one partition
# "debug". The config suits a container: no cgroups (ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none), no accounting database, every daemon as root.
#
# Idempotent: installs what is missing (as root, with apt), writes the config only when it differs,
# starts only the daemons that are not running, and exits 0 once the node accepts jobs. Exits
# non-zero, saying why (with the daemons' last log lines), when SLURM cannot start here.
#
#   bash scripts/slurm/start.sh      # then: srun -n 2 hostname; sinfo; squeue
#   bash scripts/slurm/stop.sh       # stop the daemons again
set -euo pipefail

CONF_DIR=/etc/slurm
STATE_DIR=/var/spool/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm
PARTITION=${SLURM_TEST_PARTITION:-debug}

say() { echo "scripts/slurm/start.sh: $*"; }
fail() { say "$*" >&2; exit 1; }

[ "$(id -u)" = "0" ] || fail "needs root (it installs packages, writes $CONF_DIR and starts daemons as root)."

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
    || ! command -v srun >/dev/null; then
    command -v apt-get >/dev/null || fail "slurmctld/slurmd/munge are missing and there is no apt-get to install them."
    say "installing Debian's slurm-wlm and munge"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        slurm-wlm munge >/dev/null
fi

HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

# ---- munge: SLURM's authentication between its daemons and commands
if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
mkdir -p /run/munge /var/lib/munge /var/log/munge
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge /var/log/munge
chmod 0400 /etc/munge/munge.key
chmod 0755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
    munge -n | unmunge >/dev/null || fail "munged did not start: $(tail -5 /var/log/munge/munged.log 2>/dev/null)"
fi

# ---- slurm.conf: one node, this machine, no cgroups
mkdir -p "$CONF_DIR" "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR"
WANTED=$(cat <<CONF
# Written by notebook_launcher's scripts/slurm/start.sh: a single-node SLURM for tests in a container.
ClusterName=notebook-launcher
SlurmctldHost=$HOST(127.0.0.1)
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
LaunchParameters=use_interactive_step
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
InactiveLimit=0
SlurmdTimeout=300
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
)
if [ ! -f "$CONF_DIR/slurm.conf" ] || [ "$(cat "$CONF_DIR/slurm.conf")" != "$WANTED" ]; then
    say "writing $CONF_DIR/slurm.conf (node $HOST, $CPUS CPUs, partition $PARTITION)"
    printf '%s\n' "$WANTED" > "$CONF_DIR/slurm.conf"
    CHANGED=1
else
    CHANGED=0
fi

source "$(dirname "$0")/daemons.sh"  # running, stop_daemon
if [ "$CHANGED" = 1 ]; then  # a new config needs fresh daemons
    stop_daemon /run/slurmd.pid
    stop_daemon /run/slurmctld.pid
fi
if ! running /run/slurmctld.pid; then
    say "starting slurmctld"
    /usr/sbin/slurmctld -c 2>>"$LOG_DIR/slurmctld.start.err" || true   # -c: forget state of earlier runs
fi
if ! running /run/slurmd.pid; then
    say "starting slurmd"
    /usr/sbin/slurmd 2>>"$LOG_DIR/slurmd.start.err" || true
fi

# ---- wait until the node takes jobs
waited_from=$SECONDS  # sinfo itself can wait ~10 s for a controller that does not answer: a deadline, not a count
while [ $((SECONDS - waited_from)) -lt 60 ]; do
    if [ $((SECONDS - waited_from)) -ge 10 ] && ! running /run/slurmctld.pid; then  # 10 s: its pid file is written
        fail "slurmctld is not running.
--- slurmctld.log ---
$(tail -15 "$LOG_DIR/slurmctld.log" 2>/dev/null; tail -5 "$LOG_DIR/slurmctld.start.err" 2>/dev/null)"
    fi
    state=$(timeout 10 sinfo -h -n "$HOST" -o %T 2>/dev/null | head -1 || true)
    case "$state" in
        idle*|mixed*|allocated*|completing*) say "SLURM is up: node $HOST is $state in partition $PARTITION"; exit 0 ;;
        down*|drain*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
done
fail "the node did not become ready (state: ${state:-unknown}).
--- slurmctld.log ---
$(tail -15 "$LOG_DIR/slurmctld.log" 2>/dev/null; cat "$LOG_DIR/slurmctld.start.err" 2>/dev/null | tail -5)
--- slurmd.log ---
$(tail -15 "$LOG_DIR/slurmd.log" 2>/dev/null; cat "$LOG_DIR/slurmd.start.err" 2>/dev/null | tail -5)"
