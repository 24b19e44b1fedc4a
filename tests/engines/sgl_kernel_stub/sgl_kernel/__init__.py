"""A test fixture standing in for SGLang's native kernel package (`sgl_kernel`, PyPI `sglang-kernel`), so
that real SGLang 0.5.23 serves a tiny model on a CPU in the tests.

Why: PyPI has no CPU build of `sgl_kernel`, and building it from source takes 30-60+ CPU minutes. On a CPU
without AMX, SGLang's CPU engine (`SGLANG_USE_CPU_ENGINE=1 --device cpu --attention-backend torch_native`)
calls exactly one of its functions, `assign_req_to_token_pool_cpu` (sglang/srt/mem_cache/allocation.py),
which is written here in plain torch. Every other name can still be imported, because SGLang imports many
at module level on paths the CPU never runs, but calling one raises at once, so a code path that would need
the real kernels fails loudly instead of computing something wrong. Everything else is real SGLang.

tests/setup/sglang_server.sh puts this directory first on the server's PYTHONPATH
(tests/engines/sglang_server.py); nothing of the project imports it.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch

__version__ = "0.0.0+cpu-test-stub"


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """What the triton kernel `assign_req_to_token_pool` does, one request at a time: request i's slots
    start_offset[i]:end_offset[i] in its row of req_to_token get the next end-start entries of
    out_cache_loc, which holds every request's new slots back to back."""
    del pool_len  # the row length; req_to_token's rows already have it
    taken = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        count = end - start
        req_to_token[row, start:end] = out_cache_loc[taken:taken + count].to(req_to_token.dtype)
        taken += count


def _missing(name: str) -> Any:
    def call(*args: object, **kwargs: object) -> NoReturn:
        raise NotImplementedError(
            f"sgl_kernel.{name} was called, but this is the CPU test stub (tests/engines/sgl_kernel_stub), which "
            "implements only assign_req_to_token_pool_cpu: this code path needs the real sgl_kernel")
    call.__name__ = name
    return call


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _missing(name)
