"""`--shard auto`: this client's shard K of N, read from the cluster scheduler's environment (pure).

The scheduler places the work and restarts it; the shard index comes from what it sets for each task:

| scheduler | K | N |
|---|---|---|
| SLURM job array | `SLURM_ARRAY_TASK_ID` | `SLURM_ARRAY_TASK_COUNT` (else `SLURM_ARRAY_TASK_MAX` + 1) |
| SLURM job step of several tasks (`srun`) | `SLURM_PROCID` | `SLURM_NTASKS` |
| Kubernetes Indexed Job | `JOB_COMPLETION_INDEX` | `--shard-count` or `REGEN_SHARD_COUNT` (required) |

Array indices are the shard indices, so an array is submitted as `--array=0-(N-1)`. A count given by
`--shard-count` or `REGEN_SHARD_COUNT` always wins; without one, the array must be the whole range 0..N-1
(`SLURM_ARRAY_TASK_MIN` 0, `MAX` = `COUNT` - 1; `COUNT` or `MAX` alone will do), so that resubmitting one
failed index (`--array=2`, an array of one task) is refused instead of quietly becoming shard 0 of 1. An
array task is an array task even when it also runs several `srun` tasks. Every refusal says what was found
and what to give.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from client.core.errors import ShardEnvError

COUNT_ENV = "REGEN_SHARD_COUNT"


@dataclass(frozen=True, slots=True)
class ShardChoice:
    """Shard `index` of `count`, and where it came from (logged, and recorded in the S3 manifest)."""

    index: int
    count: int
    source: str


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ShardEnvError(f"--shard auto: {name}={raw!r} is not a whole number") from None
    if value < 0:
        raise ShardEnvError(f"--shard auto: {name}={raw!r} is negative")
    return value


def _given_count(env: Mapping[str, str], flag: int | None) -> tuple[int, str] | None:
    if flag is not None:
        if flag < 1:
            raise ShardEnvError(f"--shard-count {flag}: the shard count must be at least 1")
        return flag, f"--shard-count {flag}"
    count = _int(env, COUNT_ENV)
    if count is None:
        return None
    if count < 1:
        raise ShardEnvError(f"--shard auto: {COUNT_ENV}={count}: the shard count must be at least 1")
    return count, f"{COUNT_ENV}={count}"


def _checked(index: int, count: int, source: str) -> ShardChoice:
    if index >= count:
        raise ShardEnvError(f"--shard auto: index {index} is not below the shard count {count} ({source}); "
                            f"give the job's full shard count with --shard-count N or {COUNT_ENV}=N")
    return ShardChoice(index, count, source)


def _slurm_array(env: Mapping[str, str], task: int, given: tuple[int, str] | None) -> ShardChoice:
    if given is not None:
        return _checked(task, given[0], f"SLURM array task SLURM_ARRAY_TASK_ID={task}, {given[1]}")
    count, low, high = (_int(env, f"SLURM_ARRAY_TASK_{k}") for k in ("COUNT", "MIN", "MAX"))
    low = 0 if low is None else low
    if count is not None and high is None:  # COUNT without MAX: the array is low..low+COUNT-1
        high = low + count - 1
    if high is None:
        raise ShardEnvError("--shard auto: SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT nor "
                            f"SLURM_ARRAY_TASK_MAX is; give the shard count with --shard-count N or {COUNT_ENV}=N")
    count = high + 1 if count is None else count
    if low != 0 or high != count - 1:
        raise ShardEnvError(
            f"--shard auto: this array ({count} task(s), indices {low}-{high}) is not the whole range 0..N-1, so "
            "its size is not the shard count (a resubmission of some indices, or a step); give the job's full "
            f"shard count with --shard-count N or {COUNT_ENV}=N (e.g. sbatch --array=2 "
            f"--export=ALL,{COUNT_ENV}=4 ...)")
    return _checked(task, count, f"SLURM array task SLURM_ARRAY_TASK_ID={task} of SLURM_ARRAY_TASK_COUNT={count}")


def shard_from_env(env: Mapping[str, str], count: int | None = None) -> ShardChoice:
    """Shard K of N from the scheduler's environment; `count` is `--shard-count` (overrides the env's N).

    Raises ShardEnvError naming what is missing or inconsistent.
    """
    given = _given_count(env, count)
    task = _int(env, "SLURM_ARRAY_TASK_ID")
    if task is not None:
        return _slurm_array(env, task, given)
    procid = _int(env, "SLURM_PROCID")
    if procid is not None:
        if given is not None:
            return _checked(procid, given[0], f"SLURM task SLURM_PROCID={procid}, {given[1]}")
        ntasks = _int(env, "SLURM_NTASKS")
        if ntasks is None or ntasks < 1:
            raise ShardEnvError("--shard auto: SLURM_PROCID is set but SLURM_NTASKS is not; run the client with "
                                f"srun, or give the shard count with --shard-count N or {COUNT_ENV}=N")
        return _checked(procid, ntasks, f"SLURM task SLURM_PROCID={procid} of SLURM_NTASKS={ntasks}")
    index = _int(env, "JOB_COMPLETION_INDEX")
    if index is not None:
        if given is None:
            raise ShardEnvError(f"--shard auto: JOB_COMPLETION_INDEX={index} (a Kubernetes Indexed Job) gives the "
                                f"index only; give the shard count (the Job's completions) with --shard-count N "
                                f"or {COUNT_ENV}=N")
        return _checked(index, given[0], f"Kubernetes Indexed Job JOB_COMPLETION_INDEX={index}, {given[1]}")
    raise ShardEnvError("--shard auto: no scheduler says which shard this is: none of SLURM_ARRAY_TASK_ID "
                        "(a SLURM array), SLURM_PROCID (a SLURM task under srun) or JOB_COMPLETION_INDEX (a "
                        "Kubernetes Indexed Job) is set; give --shard K/N instead")
