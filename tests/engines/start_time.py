"""A server's start-up is bounded by its own wait, not by the time limit of the test that needs it.

pytest-timeout times a test's setup, call and teardown together (`timeout_func_only` is false), so a
session fixture that starts a server runs on the clock of whichever test happens to need it first. A real
vLLM or SGLang server takes 40 s on an idle 2-core machine and minutes on a loaded one; the test's own
limit would kill it while it is still loading; a simulated server or the S3 protocol server takes a
second idle and tens of seconds on a starved CPU. `server_start()` stops the running test's timer while
a server starts (the start has its own bound, and only while the server's process lives: an engine
`vllm_server.STARTUP_TIMEOUT_S`, the small servers `SMALL_SERVER_START_S`) and gives the test its whole
limit again afterwards.

This module is a pytest plugin (tests/conftest.py lists it in `pytest_plugins`): it keeps the test that is
running, which a session fixture's request does not name.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

# How long a simulated server or the S3 protocol server may take to answer, while its process lives: about
# a second on an idle machine; the bound is for a hung one, not a slow one.
SMALL_SERVER_START_S = 300.0

_running: list[pytest.Item] = []  # the test being run, while it is (one at a time per process)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.remove(item)


def _limit(item: pytest.Item) -> float | None:
    """The test's pytest-timeout limit in seconds (its marker, else the ini / command line), or None."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    value = item.config.getoption("timeout", None) or item.config.getini("timeout")
    return float(value) if value else None


@contextlib.contextmanager
def server_start() -> Iterator[None]:
    """Pause the running test's pytest-timeout timer for a server's start-up; restart it in full after."""
    item = _running[-1] if _running else None
    if item is None or not item.config.pluginmanager.hasplugin("timeout"):
        yield
        return
    import pytest_timeout  # the dev extra installs it; only here, where its plugin is known to be loaded

    hook = item.config.hook
    hook.pytest_timeout_cancel_timer(item=item)
    try:
        yield
    finally:
        limit = _limit(item)
        if limit:
            env = pytest_timeout.get_env_settings(item.config)
            hook.pytest_timeout_set_timer(item=item, settings=pytest_timeout.Settings(
                limit, env.method, False, env.disable_debugger_detection))
