#!/usr/bin/env bash
# Stop the local SLURM that scripts/slurm/start.sh started (slurmd, slurmctld; munged with --all),
# and return once they have ended (scripts/slurm/daemons.sh).
set -uo pipefail
source "$(dirname "$0")/daemons.sh"
stop_daemon /run/slurmd.pid
stop_daemon /run/slurmctld.pid
if [ "${1:-}" = "--all" ]; then
    stop_daemon /run/munge/munged.pid
fi
echo "scripts/slurm/stop.sh: stopped"
