#!/usr/bin/env bash
# Start a fleet of SGLang servers on this GPU node (or simulated ones: --preset sim), wait until every one
# answers /health, and write the endpoints file that `python -m client.run --endpoints @FILE` reads.
# Options, the env file, their checks and the layout are Python's (launch/plan/start.py, which prints the
# plan as shell variables; `--help` lists the options). This script starts the processes, records them
# in the PID file for launch/stop_servers.sh, waits for /health, and stops them all again on a failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

die() {
    echo "error: $*" >&2
    exit 2
}

# The planner needs Python 3.11+: the --python given on the command line if it is one, else the first of
# python3, python3.13, python3.12, python3.11 that is. The servers run under --python either way.
planner_python() {
    local arg prev="" candidates=()
    for arg in "$@"; do
        if [[ $arg == -- ]]; then break; fi
        if [[ $prev == --python ]]; then candidates+=("$arg"); fi
        if [[ $arg == --python=* ]]; then candidates+=("${arg#--python=}"); fi
        prev=$arg
    done
    for arg in ${candidates[@]+"${candidates[@]}"} python3 python3.13 python3.12 python3.11; do
        if "$arg" -I -S -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
            printf '%s' "$arg"
            return 0
        fi
    done
    return 1
}
py=$(planner_python "$@") || die "no Python 3.11 or newer found (the launcher's planner needs one): pass --python PATH"

# The repo goes on the import path of the planner and the simulator only, never of SGLang itself.
repo_path="$repo${PYTHONPATH:+:$PYTHONPATH}"
plan=$(PYTHONPATH="$repo_path" "$py" -m launch.plan.start "$@") || exit $?
eval "$plan"
if [[ $START_ACTION == show ]]; then # --help, --dry-run
    printf '%s' "$START_SHOW"
    exit 0
fi

log_dir=$START_LOG_DIR
pid_file=$START_PID_FILE
endpoints_file=$START_ENDPOINTS_FILE
field() { # field NAME INDEX: one scalar of the plan
    eval "printf '%s' \"\$PLAN_$1_$2\""
}
where() {
    if [[ $PLAN_SIMULATED == 1 ]]; then echo simulated; else echo "GPU $(field GPUS "$1")"; fi
}

# --- start ----------------------------------------------------------------------------------------------
mkdir -p "$log_dir" "$(dirname "$endpoints_file")" "$(dirname "$pid_file")"
printf '# servers started by launch/start_servers.sh on %s (preset %s); stop: launch/stop_servers.sh --pid-file %s\n' \
    "$(date '+%Y-%m-%d %H:%M:%S')" "$PLAN_PRESET" "$pid_file" >"$pid_file"

cleanup_on_failure() {
    echo "stopping the servers this run started ..." >&2
    "$here/stop_servers.sh" --pid-file "$pid_file" >&2 || true
}
trap 'cleanup_on_failure; exit 130' INT TERM

# os.setsid: each server gets its own session and process group, so stop_servers.sh can signal it with
# every child it forks (SGLang runs scheduler and detokenizer processes), and a closed terminal or ssh
# session does not hang it up.
readonly DETACH='import os, sys
try:
    os.setsid()
except OSError:
    pass
os.execvp(sys.argv[1], sys.argv[1:])'

pids=()
argv=()
envs=()
started=$SECONDS
for ((i = 0; i < PLAN_COUNT; i++)); do
    eval "argv=(\"\${PLAN_ARGV_${i}[@]}\")"
    eval "envs=(\${PLAN_ENV_${i}[@]+\"\${PLAN_ENV_${i}[@]}\"})"
    if [[ $PLAN_SIMULATED == 1 ]]; then envs+=("PYTHONPATH=$repo_path"); fi
    name=$(field NAME "$i")
    log="$log_dir/$name.log"
    { field SHOWN "$i"; echo; } >"$log"
    env ${envs[@]+"${envs[@]}"} "$py" -c "$DETACH" "${argv[@]}" >>"$log" 2>&1 </dev/null &
    pid=$!
    pids+=("$pid")
    printf '%s\t%s\t%s\t%s\n' "$pid" "$name" "$(field PORT "$i")" "$(ps -o lstart= -p "$pid" 2>/dev/null || true)" \
        >>"$pid_file"
    echo "started $name (pid $pid, $(where "$i"), port $(field PORT "$i")), log $log"
done

healthy() {
    if command -v curl >/dev/null 2>&1; then
        [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$1" 2>/dev/null || true) == 200 ]]
    else
        "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$1" >/dev/null 2>&1
    fi
}

fail() { # fail INDEX REASON: name the server, show its log's end
    local name log
    name=$(field NAME "$1")
    log="$log_dir/$name.log"
    {
        echo "error: $name ($(where "$1"), port $(field PORT "$1")) $2"
        echo "last lines of $log:"
        tail -n 40 "$log" | sed 's/^/  | /'
    } >&2
}

pending=()
for ((i = 0; i < PLAN_COUNT; i++)); do pending+=("$i"); done
deadline=$((SECONDS + START_HEALTH_TIMEOUT))
while [[ ${#pending[@]} -gt 0 ]]; do
    still=()
    for i in "${pending[@]}"; do
        pid=${pids[$i]}
        state=$(ps -o stat= -p "$pid" 2>/dev/null || true)
        if [[ -z $state || $state == Z* ]]; then
            code=0
            wait "$pid" 2>/dev/null || code=$?
            fail "$i" "exited (code $code) before it answered /health"
            cleanup_on_failure
            exit 1
        fi
        if healthy "$(field HEALTH "$i")"; then
            echo "$(field NAME "$i") ready at $(field URL "$i") after $((SECONDS - started))s"
        else
            still+=("$i")
        fi
    done
    pending=(${still[@]+"${still[@]}"})
    [[ ${#pending[@]} -eq 0 ]] && break
    if [[ $SECONDS -ge $deadline ]]; then
        for i in "${pending[@]}"; do
            fail "$i" "did not answer /health within ${START_HEALTH_TIMEOUT}s (raise --health-timeout if it is still loading)"
        done
        cleanup_on_failure
        exit 1
    fi
    sleep "$START_POLL"
done
trap - INT TERM

tmp="$endpoints_file.tmp.$$"
{
    echo "# $PLAN_COUNT server(s), preset $PLAN_PRESET, ready $(date '+%Y-%m-%d %H:%M:%S'); written by launch/start_servers.sh"
    echo "# stop them: launch/stop_servers.sh --pid-file $pid_file"
    for ((i = 0; i < PLAN_COUNT; i++)); do
        field URL "$i"
        echo
    done
} >"$tmp"
mv "$tmp" "$endpoints_file"

echo "all $PLAN_COUNT server(s) ready in $((SECONDS - started))s"
echo "endpoints: $endpoints_file"
echo "run the client:  python -m client.run --endpoints @$endpoints_file ..."
echo "stop them:       launch/stop_servers.sh --pid-file $pid_file"
