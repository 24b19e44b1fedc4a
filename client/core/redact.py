"""Keeping secrets out of everything the client prints, stores or shows.

Two rules, for text that may carry a secret (an error message, a server's error body, a URL as typed):

- `url(raw)`: one URL as the user typed it, possibly malformed (no scheme, `http:/`, `http//`, a password
  holding `/`, `#` or `?`). Everything between the scheme and the last `@` is userinfo and is masked, so a
  typo cannot make a parser see the password as a path, port or fragment and print it.
- `text(s)`: free text. The userinfo of every `scheme:/...@` in it is masked, and so is every known secret:
  those `remember`ed (the API key, URL passwords and user-name tokens) and the AWS keys in the environment
  (read when called, since boto reads them then too). Servers and proxies may echo the Authorization header
  in an error body, which would otherwise land in the failures file and the live view.

Secrets shorter than MIN_SECRET are not searched for in free text: masking every "a" or "12" would garble
every message, and a credential that short is no protection anyway.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote, unquote

MASK = "***"
MIN_SECRET = 4
ENV_SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

_known: set[str] = set()

# A scheme (or a scheme that lost its colon) and the slashes after it: what is kept in front of the mask.
_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:?/+")
# In free text: `scheme:/`, `scheme://` or `scheme//`, then userinfo up to the last `@` of the same word.
_USERINFO = re.compile(r"(?P<prefix>\b[A-Za-z][A-Za-z0-9+.-]*(?::/{1,2}|//))[^\s'\"<>]*@")


def remember(secret: str | None) -> None:
    """Mask `secret` (and its percent-encoded and decoded forms) in every later `text` call."""
    if not secret:
        return
    for form in (secret, unquote(secret), quote(secret, safe="")):
        if len(form) >= MIN_SECRET:
            _known.add(form)


def forget_all() -> None:
    """Drop every remembered secret (for tests; a run remembers its secrets for its whole life)."""
    _known.clear()


def _secrets() -> list[str]:
    found = set(_known)
    found.update(value for name in ENV_SECRETS if len(value := os.environ.get(name, "")) >= MIN_SECRET)
    # Longest first, so a secret that contains another is masked whole.
    return sorted(found, key=len, reverse=True)


def url(raw: str) -> str:
    """`raw` with its userinfo (everything between the scheme and the last `@`) masked."""
    head, at, tail = raw.rpartition("@")
    if not at:
        return text(raw)
    prefix = _PREFIX.match(head)
    return text(f"{prefix.group(0) if prefix else ''}{MASK}@{tail}")


def text(value: str) -> str:
    """`value` with the userinfo of every URL in it and every known secret masked."""
    value = _USERINFO.sub(lambda m: f"{m.group('prefix')}{MASK}@", value)
    for secret in _secrets():
        value = value.replace(secret, MASK)
    return value
