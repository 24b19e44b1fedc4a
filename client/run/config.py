"""The settings of one `client.run`, frozen: built and checked from the command line by client.run.cli
(`config_from`), then read, never changed, by every part of the run. Nothing below the command line sees
argparse."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from client.core.options import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_RETRY_AFTER_S, DEFAULT_SEGMENT_AGE_S
from client.core.payload import SamplingSettings
from client.core.sampling_plan import SamplingPlan
from client.engine.conversation import Turns
from client.fleet.options import FleetConfig


@dataclass(frozen=True, slots=True)
class S3Config:
    """--s3 and the options that need it (named as the options are)."""

    s3: str
    s3_endpoint_url: str | None
    sync_interval: float
    sync_wait: float
    delete_uploaded: bool
    s3_gzip: bool
    s3_part_mb: float


@dataclass(frozen=True, slots=True)
class SimConfig:
    """--simulate N: a local fleet of simulated servers instead of --endpoints."""

    servers: int
    max_running: int | None  # None: the slots of the GPU kind played
    speed: float
    extra_args: tuple[str, ...]
    seed: int
    gpu_kind: str | None = None  # the GPU the servers play (simulator.kinds); None: a generic one


@dataclass(frozen=True, slots=True)
class ViewConfig:
    plain: bool
    progress_every: float
    estimate: Path | None
    gpus: int | None
    metrics_port: int | None
    metrics_host: str
    metrics_linger: float


@dataclass(frozen=True, slots=True)
class RunConfig:
    fleet: FleetConfig  # urls empty under --simulate until its servers are up
    sampling: SamplingSettings  # the command line's values; a plan's settings start from them
    prompts: tuple[Path, ...]
    out: Path
    view: ViewConfig
    s3: S3Config | None = None
    simulate: SimConfig | None = None
    turns: Turns = "last"
    strict: bool = False
    show_problems: int = 20
    allow_settings_change: bool = False
    retry_too_long: bool = False
    redo_edited: bool = False
    redo_repetition: bool = False  # --redo-repetition: take out results a loop stop ended, generate them again
    shard: str | None = None
    shard_count: int | None = None
    segment_mb: float = 256.0
    segment_age: float = DEFAULT_SEGMENT_AGE_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_requests_per_second: float | None = None
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER_S
    grace: float = 30.0
    loop_stop: bool = True
    train_window: int | None = None
    plan: SamplingPlan | None = None  # --sampling-plan; None: one setting, `sampling`
    tokenizer: Path | None = None  # --tokenizer: count prompts here for servers that cannot
    extend: Path | None = None  # --extend FROM: continue FROM's cut replies instead of reading prompts

    @property
    def segment_age_s(self) -> float:
        """With S3, a segment closes at least every sync interval, so it can go up."""
        return min(self.segment_age, self.s3.sync_interval) if self.s3 is not None else self.segment_age
