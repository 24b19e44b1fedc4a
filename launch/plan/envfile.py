"""The env-file format of launch/start_servers.sh (launch/*.env), read into KEY -> (value, FILE:LINE).

One KEY=VALUE a line; blank lines and `#` comments; an optional `export `; blanks around `=` are ignored.
A value in '...' or "..." is taken as it is up to the closing quote, and only a comment may follow; an
unquoted value ends before ` #` and loses trailing blanks. Nothing is expanded and the caller's environment
is never read, so a HOST or PYTHON exported in the shell cannot leak in. Errors name FILE:LINE.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from pathlib import Path

from launch.plan.errors import PlanError


def read_env_file(path: str, keys: Collection[str]) -> dict[str, tuple[str, str]]:
    """KEY -> (raw value, "FILE:LINE") for each assignment; a later line wins over an earlier one."""
    file = Path(path)
    if not file.is_file():
        raise PlanError(f"env file '{path}' not found" if not file.exists() else f"env file '{path}' is not a file")
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read env file '{path}': {exc}") from None
    out: dict[str, tuple[str, str]] = {}
    for number, raw in enumerate(lines, start=1):
        where = f"{path}:{number}"
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        if "=" not in line:
            raise PlanError(f"{where}: expected KEY=VALUE, got: {line}")
        key, value = line.split("=", 1)
        key = key.strip()
        if key not in keys:
            hint = [key.upper()] if key.upper() in keys else difflib.get_close_matches(key.upper(), keys, n=1)
            raise PlanError(f"{where}: unknown setting '{key}'" + (f" (did you mean {hint[0]}?)" if hint else "")
                            + "; the keys are listed in launch/start_servers.sh --help")
        out[key] = (_unquote(value, where), where)
    return out


def _unquote(value: str, where: str) -> str:
    text = value.lstrip()
    if text[:1] in ("'", '"'):
        quote = text[0]
        end = text.find(quote, 1)
        if end < 0:
            raise PlanError(f"{where}: unterminated {quote} quote")
        rest = text[end + 1:].strip()
        if rest and not rest.startswith("#"):
            raise PlanError(f"{where}: unexpected text after the closing quote: {rest}")
        return text[1:end]
    for k, char in enumerate(value):  # a comment starts at a '#' after a blank: KEY=a#b is "a#b"
        if char == "#" and k > 0 and value[k - 1].isspace():
            value = value[:k]
            break
    return value.strip()
