# Sourced by start.sh and stop.sh: whether one of the local SLURM's daemons runs, and stopping one.
# A daemon told to stop is waited for: slurmctld saves its state for a second or more after SIGTERM,
# and a start.sh run meanwhile took it for running, started no new one, and then waited in vain for
# a controller that was gone (the node stayed "unknown").

# running PIDFILE: the daemon of PIDFILE is alive
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# ended PID TENTHS: wait up to TENTHS tenths of a second for PID to end; non-zero if it has not
ended() {
    for _ in $(seq "$2"); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    ! kill -0 "$1" 2>/dev/null
}

# stop_daemon PIDFILE: SIGTERM, wait up to 30 s for the process to end, then SIGKILL and wait again
stop_daemon() {
    local pid
    running "$1" || return 0
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || return 0
    ended "$pid" 300 && return 0
    echo "scripts/slurm: $(cat "/proc/$pid/comm" 2>/dev/null || echo "pid $pid") did not end within 30 s of SIGTERM: SIGKILL" >&2
    kill -9 "$pid" 2>/dev/null || true
    ended "$pid" 50 || true
}
