"""The SGLang server flags that launcher options stand for, with the spellings SGLang 0.5.23 accepts.

Owns two facts. First, which SGLang flag each launcher option becomes, so that SGLang's own spelling works
as that option (`--model` for `--model-path`, `--tp-size` for `--tp`, `--port` for `--base-port`); the
aliases are SGLang's `Arg(aliases=...)` in `sglang/srt/arg_groups/fields/`, and tests check this table
against SGLang's real parser. Second, that those flags may not come again in the extra server arguments,
where they would quietly override the layout: `-- --port 8000` would put every server on one port.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from launch.plan.errors import PlanError


@dataclass(frozen=True)
class OwnedFlag:
    """A launcher option and the SGLang flag it sets: SGLang's primary spelling first, then its aliases."""

    option: str
    sglang: tuple[str, ...]

    def aliases(self) -> tuple[str, ...]:
        """SGLang's spellings that differ from the launcher's option, accepted as that option."""
        return tuple(s for s in self.sglang if s != self.option)


OWNED_FLAGS: tuple[OwnedFlag, ...] = (
    OwnedFlag("--model-path", ("--model-path", "--model")),
    OwnedFlag("--served-model-name", ("--served-model-name",)),
    OwnedFlag("--host", ("--host",)),
    OwnedFlag("--base-port", ("--port",)),
    OwnedFlag("--tp", ("--tp-size", "--tensor-parallel-size")),
    OwnedFlag("--dp", ("--dp-size", "--data-parallel-size")),
    OwnedFlag("--mem-fraction", ("--mem-fraction-static",)),
    OwnedFlag("--context-length", ("--context-length",)),
    OwnedFlag("--kv-cache-dtype", ("--kv-cache-dtype",)),
    OwnedFlag("--mtp-algorithm", ("--speculative-algorithm",)),
    OwnedFlag("--mtp-steps", ("--speculative-num-steps",)),
    OwnedFlag("--mtp-topk", ("--speculative-eagle-topk",)),
    OwnedFlag("--mtp-draft-tokens", ("--speculative-num-draft-tokens",)),
    OwnedFlag("--api-key", ("--api-key",)),
)

_BY_OPTION = {f.option: f for f in OWNED_FLAGS}
_BY_SGLANG = {s: f for f in OWNED_FLAGS for s in f.sglang}


def sglang_aliases(option: str) -> tuple[str, ...]:
    """The extra spellings accepted for a launcher option (none for options SGLang does not have)."""
    owned = _BY_OPTION.get(option)
    return owned.aliases() if owned else ()


def check_server_args(args: Iterable[str]) -> None:
    """Refuse extra server arguments that set a flag the launcher sets from one of its own options."""
    for arg in args:
        name = arg.split("=", 1)[0]
        owned = _BY_SGLANG.get(name)
        if owned is not None:
            raise PlanError(f"{name} in the extra server arguments would override the launcher's own setting "
                            f"(and its layout): use the launcher's {owned.option} instead")
