#!/usr/bin/env bash
# Start a fleet of SGLang servers on this GPU node (or simulated ones: --preset sim), wait until every one
# answers /health, and write the endpoints file that `python -m client.run --endpoints @FILE` reads.
# The layout (TP/DP, GPUs, ports, flags) comes from the planner, `python -m launch.plan`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

usage() {
    cat <<'EOF'
Usage: launch/start_servers.sh --preset NAME [options] [-- EXTRA SERVER ARGS...]

Start one SGLang server per replica (python -m sglang.launch_server, or python -m launch.sim for the sim
preset), wait for each /health, then write the endpoints file and a PID file for launch/stop_servers.sh.

Settings come from flags, an env file (--env-file FILE, KEY=VALUE lines), or both; flags win. Each flag
below has the env-file key in brackets.

Hardware
  --preset NAME            node type: blackwell-4x, b200-8x, b200-7x, sim (launch/presets/) [PRESET]
  --gpus LIST              GPUs to use, e.g. 0,1,2,3 or 0-6 (default: all)                  [GPUS]
  --num-gpus N             GPUs on the node (default: the preset's, capped by nvidia-smi)    [NUM_GPUS]
  --gpu-memory-gib G       memory per GPU (default: the preset's)                          [GPU_MEMORY_GIB]
Model
  --model-path PATH        HF repo id or local path (default: Qwen/Qwen3.6-27B)              [MODEL_PATH]
  --served-model-name N    name clients send (default: Qwen/Qwen3.6-27B)              [SERVED_MODEL_NAME]
  --dtype bf16|fp8         weight type; fp8 defaults the path to Qwen/Qwen3.6-27B-FP8             [DTYPE]
  --params-b B             parameters in billions, for the memory plan (default: 27.8)         [PARAMS_B]
Layout and memory
  --tp N / --dp N          tensor / data parallel per server (default: TP as small as fits, DP 1) [TP] [DP]
  --mem-fraction F         SGLang --mem-fraction-static (default: the preset's)            [MEM_FRACTION]
  --context-length N       SGLang --context-length (default: the model's)                [CONTEXT_LENGTH]
  --kv-tokens N            KV-cache tokens a replica must hold (default: 65536)                [KV_TOKENS]
  --kv-cache-dtype T       auto, bf16, fp8_e4m3, fp8_e5m2 (default: auto)                [KV_CACHE_DTYPE]
MTP (speculative decoding with the model's own MTP head)
  --mtp on|off, --no-mtp   default on                                                              [MTP]
  --mtp-algorithm A        EAGLE or NEXTN (default: EAGLE)                                [MTP_ALGORITHM]
  --mtp-steps N            --speculative-num-steps (default: 3)                               [MTP_STEPS]
  --mtp-topk N             --speculative-eagle-topk (default: 1)                               [MTP_TOPK]
  --mtp-draft-tokens N     --speculative-num-draft-tokens (default: steps + 1)         [MTP_DRAFT_TOKENS]
Servers
  --host H                 bind address (default: 0.0.0.0; sim: 127.0.0.1)                        [HOST]
  --advertise-host H       host written to the endpoints file (default: this machine's name) [ADVERTISE_HOST]
  --base-port P            port of the first server; the others follow (default: 30000)       [BASE_PORT]
  --api-key KEY            SGLang --api-key (masked in all output)                              [API_KEY]
  --extra-args STRING      more server arguments, shell-quoted; they come last and win      [EXTRA_ARGS]
  --python PATH            interpreter with SGLang installed (default: python3)                  [PYTHON]
Run
  --log-dir DIR            one log per server (default: runs/servers in the repo)              [LOG_DIR]
  --endpoints-file FILE    (default: LOG_DIR/endpoints.txt)                              [ENDPOINTS_FILE]
  --pid-file FILE          (default: LOG_DIR/servers.pid)                                      [PID_FILE]
  --health-timeout S       seconds to wait for all servers (default: 1800; sim: 60)      [HEALTH_TIMEOUT]
  --env-file FILE          read settings from FILE first (see launch/*.env)
  --explain                print the per-GPU memory arithmetic behind the layout               [EXPLAIN]
  --dry-run                print the commands and the endpoints, start nothing                 [DRY_RUN]
  -h, --help               this help

If a server exits or the timeout passes, the error names it and shows the end of its log, and every server
this run started is stopped again. Servers run in their own sessions: they outlive this shell and a
closed terminal. Stop them with: launch/stop_servers.sh [--pid-file FILE]

Examples
  launch/start_servers.sh --preset blackwell-4x --explain
  launch/start_servers.sh --preset b200-8x --gpus 0-6 --api-key "$KEY"
  launch/start_servers.sh --env-file launch/b200.env --dry-run
  launch/start_servers.sh --preset sim --log-dir /tmp/fleet
EOF
}

die() {
    echo "error: $*" >&2
    exit 2
}

is_known_key() {
    case $1 in
    PRESET | GPUS | NUM_GPUS | GPU_MEMORY_GIB | MODEL_PATH | SERVED_MODEL_NAME | DTYPE | PARAMS_B | TP | DP | \
        MEM_FRACTION | CONTEXT_LENGTH | KV_TOKENS | KV_CACHE_DTYPE | MTP | MTP_ALGORITHM | MTP_STEPS | MTP_TOPK | \
        MTP_DRAFT_TOKENS | HOST | ADVERTISE_HOST | BASE_PORT | API_KEY | EXTRA_ARGS | PYTHON | LOG_DIR | \
        ENDPOINTS_FILE | PID_FILE | HEALTH_TIMEOUT | EXPLAIN | DRY_RUN)
        return 0
        ;;
    *) return 1 ;;
    esac
}

# Settings live in S_<KEY> variables, so that names like HOST or PYTHON in the caller's environment are
# never read by accident: only flags and the env file set them.
set_setting() {
    is_known_key "$1" || die "$3: unknown setting '$1'; see launch/start_servers.sh --help for the keys"
    printf -v "S_$1" '%s' "$2"
}

truthy() {
    case $1 in
    "" | 0 | false | no | off) return 1 ;;
    *) return 0 ;;
    esac
}

get() {
    local name="S_$1"
    printf '%s' "${!name-}"
}

load_env_file() {
    local file=$1 line key value quote n=0
    [[ -f $file ]] || die "env file '$file' not found"
    while IFS= read -r line || [[ -n $line ]]; do
        n=$((n + 1))
        line=${line#"${line%%[![:space:]]*}"}
        [[ -z $line || $line == \#* ]] && continue
        line=${line#export }
        [[ $line == *=* ]] || die "$file:$n: expected KEY=VALUE, got: $line"
        key=${line%%=*}
        value=${line#*=}
        if [[ $value == \"* || $value == \'* ]]; then # quoted: up to the closing quote, then a comment
            quote=${value:0:1}
            value=${value:1}
            [[ $value == *"$quote"* ]] || die "$file:$n: unterminated $quote quote"
            value=${value%%"$quote"*}
        else
            value=${value%%[[:space:]]#*}
            value=${value%"${value##*[![:space:]]}"}
        fi
        set_setting "$key" "$value" "$file:$n"
    done <"$file"
}

# --- command line: collect, then apply on top of the env file ----------------------------------------
env_file=""
flag_keys=()
flag_values=()
passthrough=()
while [[ $# -gt 0 ]]; do
    arg=$1
    shift
    case $arg in
    -h | --help)
        usage
        exit 0
        ;;
    --)
        passthrough=("$@")
        break
        ;;
    --dry-run | --explain)
        key=$(printf '%s' "${arg#--}" | tr 'a-z-' 'A-Z_')
        flag_keys+=("$key")
        flag_values+=(1)
        ;;
    --no-mtp)
        flag_keys+=(MTP)
        flag_values+=(off)
        ;;
    --*)
        name=${arg%%=*}
        if [[ $arg == *=* ]]; then
            value=${arg#*=}
        else
            [[ $# -gt 0 ]] || die "$name needs a value; see --help"
            value=$1
            shift
        fi
        if [[ $name == --env-file ]]; then
            env_file=$value
            continue
        fi
        key=$(printf '%s' "${name#--}" | tr 'a-z-' 'A-Z_')
        [[ $key == DRY_RUN || $key == EXPLAIN ]] && die "$name takes no value"
        is_known_key "$key" || die "unknown option $name; see --help"
        flag_keys+=("$key")
        flag_values+=("$value")
        ;;
    *)
        die "unexpected argument '$arg'; server arguments go after '--' or in --extra-args"
        ;;
    esac
done
if [[ -n $env_file ]]; then
    load_env_file "$env_file"
fi
for ((k = 0; k < ${#flag_keys[@]}; k++)); do
    set_setting "${flag_keys[$k]}" "${flag_values[$k]}" "command line"
done

python=$(get PYTHON)
python=${python:-python3}
command -v "$python" >/dev/null 2>&1 || die "no Python interpreter '$python'; pass --python PATH (the one with SGLang)"
log_dir=$(get LOG_DIR)
log_dir=${log_dir:-$repo/runs/servers}
endpoints_file=$(get ENDPOINTS_FILE)
endpoints_file=${endpoints_file:-$log_dir/endpoints.txt}
pid_file=$(get PID_FILE)
pid_file=${pid_file:-$log_dir/servers.pid}
dry_run=$(get DRY_RUN)
explain=$(get EXPLAIN)

# --- the plan -------------------------------------------------------------------------------------------
plan_args=()
add() { # add FLAG KEY: pass the setting on to the planner when it is set
    local value
    value=$(get "$2")
    if [[ -n $value ]]; then plan_args+=("$1=$value"); fi
}
add --preset PRESET
add --gpus GPUS
add --num-gpus NUM_GPUS
add --gpu-memory-gib GPU_MEMORY_GIB
add --model-path MODEL_PATH
add --served-model-name SERVED_MODEL_NAME
add --dtype DTYPE
add --params-b PARAMS_B
add --tp TP
add --dp DP
add --mem-fraction MEM_FRACTION
add --context-length CONTEXT_LENGTH
add --kv-tokens KV_TOKENS
add --kv-cache-dtype KV_CACHE_DTYPE
add --mtp-algorithm MTP_ALGORITHM
add --mtp-steps MTP_STEPS
add --mtp-topk MTP_TOPK
add --mtp-draft-tokens MTP_DRAFT_TOKENS
add --host HOST
add --advertise-host ADVERTISE_HOST
add --base-port BASE_PORT
add --api-key API_KEY
add --extra-args EXTRA_ARGS
case $(get MTP) in
"") ;;
on | true | yes | 1) plan_args+=(--mtp) ;;
off | false | no | 0) plan_args+=(--no-mtp) ;;
*) die "MTP must be on or off, got '$(get MTP)'" ;;
esac
for extra in ${passthrough[@]+"${passthrough[@]}"}; do
    plan_args+=("--extra-arg=$extra")
done
if truthy "$explain"; then plan_args+=(--explain); fi
# What the node really has caps the preset (e.g. one GPU of eight out of service); the planner decides.
if command -v nvidia-smi >/dev/null 2>&1; then
    if detected=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null); then
        count=$(printf '%s\n' "$detected" | grep -c '[0-9]' || true)
        mib=$(printf '%s\n' "$detected" | sort -n | head -n 1 | tr -dc '0-9')
        if [[ $count -gt 0 && -n $mib ]]; then
            plan_args+=("--detected-gpus=$count" "--detected-gpu-memory-mib=$mib")
        fi
    fi
fi

# The repo goes on the import path of the planner and the simulator only, never of SGLang itself.
repo_path="$repo${PYTHONPATH:+:$PYTHONPATH}"
plan=$(PYTHONPATH="$repo_path" "$python" -m launch.plan --format bash --python "$python" \
    ${plan_args[@]+"${plan_args[@]}"}) || exit 2
eval "$plan"

for ((k = 0; k < PLAN_NOTES; k++)); do
    eval "echo \"note: \$PLAN_NOTE_$k\"" >&2
done
timeout_s=$(get HEALTH_TIMEOUT)
if [[ -z $timeout_s ]]; then
    if [[ $PLAN_SIMULATED == 1 ]]; then timeout_s=60; else timeout_s=1800; fi
fi
[[ $timeout_s =~ ^[0-9]+$ ]] || die "--health-timeout must be a whole number of seconds, got '$timeout_s'"
if [[ $PLAN_SIMULATED == 1 ]]; then poll=0.5; else poll=5; fi

field() { # field NAME INDEX: one scalar of the plan
    eval "printf '%s' \"\$PLAN_$1_$2\""
}

if truthy "$dry_run"; then
    echo "# dry run: $PLAN_COUNT server(s), preset $PLAN_PRESET, TP=$PLAN_TP DP=$PLAN_DP; nothing is started"
    for ((i = 0; i < PLAN_COUNT; i++)); do
        echo "$(field SHOWN "$i") > $log_dir/$(field NAME "$i").log 2>&1 &"
    done
    echo "# then wait up to ${timeout_s}s for each /health, and write $endpoints_file:"
    for ((i = 0; i < PLAN_COUNT; i++)); do
        field URL "$i"
        echo
    done
    echo "# PID file: $pid_file"
    exit 0
fi

# --- start ----------------------------------------------------------------------------------------------
if [[ -f $pid_file ]] && "$here/stop_servers.sh" --pid-file "$pid_file" --status >/dev/null 2>&1; then
    die "servers from an earlier start are still running (PID file $pid_file); stop them first:
  launch/stop_servers.sh --pid-file $pid_file"
fi
for ((i = 0; i < PLAN_COUNT; i++)); do
    hostport=$(field HEALTH "$i")
    hostport=${hostport#http://}
    hostport=${hostport%%/*}
    probe_host=${hostport%:*}
    probe_host=${probe_host#[}
    probe_host=${probe_host%]}
    port=$(field PORT "$i")
    if (exec 3<>"/dev/tcp/$probe_host/$port") 2>/dev/null; then
        die "port $port is already in use (something answers on $probe_host:$port); stop it or pick another --base-port"
    fi
done

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
    env ${envs[@]+"${envs[@]}"} "$python" -c "$DETACH" "${argv[@]}" >>"$log" 2>&1 </dev/null &
    pid=$!
    pids+=("$pid")
    printf '%s\t%s\t%s\t%s\n' "$pid" "$name" "$(field PORT "$i")" "$(ps -o lstart= -p "$pid" 2>/dev/null || true)" \
        >>"$pid_file"
    gpus=$(field GPUS "$i")
    if [[ $PLAN_SIMULATED == 1 ]]; then where="simulated"; else where="GPU $gpus"; fi
    echo "started $name (pid $pid, $where, port $(field PORT "$i")), log $log"
done

healthy() {
    if command -v curl >/dev/null 2>&1; then
        [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$1" 2>/dev/null || true) == 200 ]]
    else
        "$python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$1" \
            >/dev/null 2>&1
    fi
}

fail() { # fail INDEX REASON: name the server, show its log's end, stop the fleet
    local i=$1 name log gpus
    name=$(field NAME "$i")
    log="$log_dir/$name.log"
    gpus=$(field GPUS "$i")
    if [[ $PLAN_SIMULATED == 1 ]]; then gpus="simulated"; else gpus="GPU $gpus"; fi
    {
        echo "error: $name ($gpus, port $(field PORT "$i")) $2"
        echo "last lines of $log:"
        tail -n 40 "$log" | sed 's/^/  | /'
    } >&2
}

pending=()
for ((i = 0; i < PLAN_COUNT; i++)); do pending+=("$i"); done
deadline=$((SECONDS + timeout_s))
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
            fail "$i" "did not answer /health within ${timeout_s}s (raise --health-timeout if it is still loading)"
        done
        cleanup_on_failure
        exit 1
    fi
    sleep "$poll"
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
