#!/usr/bin/env bash
# Stop exactly the servers that launch/start_servers.sh started, as listed in its PID file: each server's
# whole process group (the server and every process it forked) gets SIGTERM, then SIGKILL after a grace
# period. A recorded PID now used by another process (same number, other start time) is left alone.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

usage() {
    cat <<'EOF'
Usage: launch/stop_servers.sh [--pid-file FILE | --log-dir DIR] [--timeout S] [--status]

Stop the servers recorded by launch/start_servers.sh, and nothing else.

  --pid-file FILE   the PID file start_servers.sh wrote (default: runs/servers/servers.pid in the repo)
  --log-dir DIR     same as --pid-file DIR/servers.pid
  --timeout S       seconds between SIGTERM and SIGKILL (default: 30)
  --status          only report which recorded servers run; exit 0 if any does, 1 if none
  -h, --help        this help
EOF
}

die() {
    echo "error: $*" >&2
    exit 2
}

pid_file="$repo/runs/servers/servers.pid"
timeout_s=30
status_only=0
while [[ $# -gt 0 ]]; do
    case $1 in
    -h | --help)
        usage
        exit 0
        ;;
    --pid-file)
        [[ $# -ge 2 ]] || die "--pid-file needs a value"
        pid_file=$2
        shift 2
        ;;
    --pid-file=*)
        pid_file=${1#*=}
        shift
        ;;
    --log-dir)
        [[ $# -ge 2 ]] || die "--log-dir needs a value"
        pid_file=$2/servers.pid
        shift 2
        ;;
    --log-dir=*)
        pid_file=${1#*=}/servers.pid
        shift
        ;;
    --timeout)
        [[ $# -ge 2 ]] || die "--timeout needs a value"
        timeout_s=$2
        shift 2
        ;;
    --timeout=*)
        timeout_s=${1#*=}
        shift
        ;;
    --status)
        status_only=1
        shift
        ;;
    *) die "unknown argument '$1'; see --help" ;;
    esac
done
[[ $timeout_s =~ ^[0-9]+$ ]] || die "--timeout must be a whole number of seconds, got '$timeout_s'"
if [[ ! -f $pid_file ]]; then
    if [[ $status_only == 1 ]]; then
        echo "no PID file at $pid_file: no servers recorded"
        exit 1
    fi
    die "no PID file at $pid_file; pass the one start_servers.sh printed (--pid-file FILE)"
fi

# A record is "ours" while its leader runs with the recorded start time, or while its process group still
# has members after the leader died (a group id is not reused while the group exists).
leader_state() { # PID LSTART -> ours | reused | gone
    local now
    now=$(ps -o lstart= -p "$1" 2>/dev/null || true)
    if [[ -z $now ]]; then
        echo gone
    elif [[ -z $2 || $now == "$2" ]]; then
        echo ours
    else
        echo reused
    fi
}

group_alive() { # some process of group $1 runs (zombies do not count: they only wait to be reaped)
    ps -A -o pgid= -o stat= 2>/dev/null | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { n++ } END { exit n == 0 }'
}

leader_running() {
    local stat
    stat=$(ps -o stat= -p "$1" 2>/dev/null || true)
    [[ -n $stat && $stat != Z* ]]
}

signal() { # SIGNAL PID: the whole group, or the process alone if it has no group of its own
    kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null || true
}

pids=()
names=()
running=0
while IFS=$'\t' read -r pid name port lstart || [[ -n ${pid-} ]]; do
    [[ -z $pid || $pid == \#* ]] && continue
    [[ $pid =~ ^[0-9]+$ ]] || die "$pid_file: not a PID file written by start_servers.sh (line '$pid')"
    state=$(leader_state "$pid" "${lstart-}")
    if [[ $state == gone ]] && group_alive "$pid"; then state=ours; fi
    if [[ $status_only == 1 ]]; then
        case $state in
        ours) echo "$name (pid $pid, port $port): running" ;;
        reused) echo "$name (pid $pid, port $port): stopped (PID now used by another process)" ;;
        gone) echo "$name (pid $pid, port $port): stopped" ;;
        esac
    fi
    if [[ $state == ours ]]; then
        running=$((running + 1))
        pids+=("$pid")
        names+=("$name")
    elif [[ $state == reused && $status_only == 0 ]]; then
        echo "$name: PID $pid now belongs to another process; left alone"
    fi
done <"$pid_file"

if [[ $status_only == 1 ]]; then
    [[ $running -gt 0 ]]
    exit
fi
if [[ $running -eq 0 ]]; then
    echo "no recorded server is running; removing $pid_file"
    rm -f "$pid_file"
    exit 0
fi

for ((k = 0; k < ${#pids[@]}; k++)); do
    echo "stopping ${names[$k]} (pid ${pids[$k]})"
    signal TERM "${pids[$k]}"
done

deadline=$((SECONDS + timeout_s))
while :; do
    left=()
    for ((k = 0; k < ${#pids[@]}; k++)); do
        pid=${pids[$k]}
        if group_alive "$pid" || leader_running "$pid"; then
            left+=("$k")
        fi
    done
    [[ ${#left[@]} -eq 0 ]] && break
    if [[ $SECONDS -ge $deadline ]]; then
        for k in "${left[@]}"; do
            echo "${names[$k]} (pid ${pids[$k]}) still running after ${timeout_s}s: SIGKILL"
            signal KILL "${pids[$k]}"
        done
        sleep 1
        break
    fi
    sleep 0.5
done

rm -f "$pid_file"
echo "stopped ${#pids[@]} server(s)"
