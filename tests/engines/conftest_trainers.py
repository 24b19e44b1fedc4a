"""Pytest fixtures for the drafter trainers' own data code (tests/engines/trainers.py).

This module owns how a test gets a trainer: ``specforge_venv`` and ``speculators_venv`` are the trainers'
venvs (``bash tests/setup/trainers.sh``), checked once per session. Every test that uses one needs the
``trainers`` marker (tests/conftest.py checks it); under CI=true a missing venv fails, elsewhere the test is
skipped with the way out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .trainers import SPECFORGE, SPECULATORS, Trainer, TrainerMissing, trainer_python, trainer_venv

__all__ = ["specforge_venv", "speculators_venv"]


def _venv(trainer: Trainer) -> Path:
    try:
        trainer_python(trainer)
    except TrainerMissing as exc:
        from tests.conftest import engine_missing  # the CI rule for every engine: fail in CI, else skip

        engine_missing(str(exc))
    return trainer_venv(trainer)


@pytest.fixture(scope="session")
def specforge_venv() -> Path:
    return _venv(SPECFORGE)


@pytest.fixture(scope="session")
def speculators_venv() -> Path:
    return _venv(SPECULATORS)
