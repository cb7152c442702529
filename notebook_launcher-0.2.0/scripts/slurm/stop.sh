#!/usr/bin/env bash
# Stop the local SLURM that scripts/slurm/start.sh started (slurmd, slurmctld; munged with --all).
set -uo pipefail
for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        kill "$(cat "$pidfile")"
    fi
done
if [ "${1:-}" = "--all" ] && [ -f /run/munge/munged.pid ]; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
fi
echo "scripts/slurm/stop.sh: stopped"
