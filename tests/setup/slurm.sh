#!/usr/bin/env bash
# Install and start a single-node SLURM cluster for the tests: Debian's slurm-wlm and munge, slurmctld
# and slurmd on 127.0.0.1, run as root, proctrack/linuxproc (no cgroups, no systemd needed). The daemons
# bind 127.0.0.1 only (CommunicationParameters=NoCtldInAddrAny,NoInAddrAny), not every interface: they
# stay running after the tests, and nothing outside this host should reach them.
#
# Usage: bash tests/setup/slurm.sh          (as root, on Debian or Ubuntu)
#
# Idempotent: packages already installed are not installed again, a config that is already in place is
# kept, and daemons already answering are left running. It ends once `sinfo` shows the node idle, or
# fails with the daemons' log lines. The node claims more CPUs than the host has
# (SlurmdParameters=config_overrides) so that a small array runs all its tasks at once on a small host.
# Outside Linux it does nothing and says so (the tests that need SLURM skip there).
set -euo pipefail

if [[ "$(uname -s)" != Linux ]]; then
    echo "slurm.sh: not Linux; no SLURM cluster (the slurm tests skip)" >&2
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    if sinfo -h >/dev/null 2>&1; then
        echo "slurm.sh: not root; a SLURM cluster already answers, using it" >&2
        exit 0
    fi
    if [[ ${CI:-} == true || ${CI:-} == 1 ]]; then
        echo "error: slurm.sh installs packages and runs slurmctld/slurmd as root: run it as root" >&2
        exit 2
    fi
    echo "slurm.sh: not root, so no SLURM cluster (the slurm tests skip; run it as root to get one)" >&2
    exit 0
fi

readonly CONF=/etc/slurm/slurm.conf
readonly CPUS=${SLURM_TEST_CPUS:-8}
readonly LOGS=/var/log/slurm

if ! command -v slurmctld >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    if ! command -v apt-get >/dev/null; then
        echo "error: slurm.sh needs apt-get (Debian/Ubuntu) to install slurm-wlm and munge" >&2
        exit 2
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# munge: the key is made by the package; make one if it is missing, then start munged once.
mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key && chmod 0755 /run/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.2
    done
    munge -n </dev/null | unmunge >/dev/null || { echo "error: munged did not start" >&2; exit 1; }
fi

node=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOGS"
want=$(cat <<EOF
# Written by tests/setup/slurm.sh: a single-node test cluster on 127.0.0.1.
ClusterName=regen-test
SlurmctldHost=${node}(127.0.0.1)
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerParameters=batch_sched_delay=0
KillWait=30
MinJobAge=600
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=${LOGS}/slurmctld.log
SlurmdLogFile=${LOGS}/slurmd.log
NodeName=${node} NodeAddr=127.0.0.1 CPUs=${CPUS} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)
changed=0
if [[ ! -f $CONF ]] || [[ "$(cat "$CONF")" != "$want" ]]; then
    printf '%s\n' "$want" >"$CONF"
    changed=1
fi

running() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

if [[ $changed -eq 1 ]]; then
    # A new config: restart whatever runs with the old one.
    for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
        if running "$pidfile"; then kill "$(cat "$pidfile")"; fi
    done
    for _ in $(seq 50); do
        running /run/slurmd.pid || running /run/slurmctld.pid || break
        sleep 0.2
    done
fi
running /run/slurmctld.pid || slurmctld
running /run/slurmd.pid || slurmd

state=""
for _ in $(seq 100); do
    state=$(sinfo -h -n "$node" -o '%t' 2>/dev/null || true)
    case $state in
        idle*|mix*|alloc*) break ;;
        down*|drain*) scontrol update nodename="$node" state=resume 2>/dev/null || true ;;
    esac
    sleep 0.3
done
case $state in
    idle*|mix*|alloc*) echo "slurm.sh: node ${node} is ${state} (slurmctld + slurmd on 127.0.0.1)" ;;
    *)
        echo "error: the SLURM node did not come up (state '${state:-none}'); last log lines:" >&2
        tail -n 20 "$LOGS/slurmctld.log" "$LOGS/slurmd.log" >&2 || true
        exit 1
        ;;
esac
