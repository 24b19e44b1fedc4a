"""Base URLs of inference servers: where each request goes, and what may be shown of the URL.

How paths are built (one rule for streams and the control plane alike):

- `root` is the base URL's path with any trailing `/` and then one trailing `/v1` removed, so
  `http://h:30000`, `http://h:30000/`, `http://h:30000/v1` and `http://h:30000/v1/` all have root `""`,
  and `http://h/api/x` and `http://h/api/x/v1/` (a reverse proxy's path prefix) have root `/api/x`.
- Every request goes to `root + SERVER_PATH`, where SERVER_PATH is what the engine serves at its top:
  `/v1/chat/completions`, `/v1/models`, `/v1/loads`, `/health`, `/metrics`. A prefix is kept for all of
  them, since a proxy that serves the API under a prefix serves the server's other routes there too.

Credentials in a URL (`http://user:KEY@host`) become `Authorization: Bearer KEY` (the password; the user
name when it is the only part given). Bearer, not Basic, because that is the one scheme OpenAI-compatible
servers check (`--api-key` of vLLM and SGLang, the OpenAI API itself); Basic would be refused. An explicit
`--api-key` wins over URL credentials. The credentials never leave this module in text form: `display`
(what records, the console, logs and errors show, as `Endpoint.url`) is the URL without them, an error
shows the URL as typed with its userinfo masked (a typo must not expose what a parser mistook for a path,
port or fragment), and the token is remembered by `client.core.redact` so that no server text echoing it
is stored or shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from client.core import redact

DEFAULT_PORTS = {"http": 80, "https": 443}
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "::1"})


@dataclass(frozen=True, slots=True)
class ServerURL:
    """A parsed base URL. `authority` is `host[:port]` as given (for the Host header), without credentials."""

    scheme: str
    host: str
    port: int
    authority: str
    root: str
    display: str
    token: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str) -> ServerURL:
        """ValueError (whose text has no credentials) when `url` is not an http(s) base URL."""
        parts = urlsplit(url.strip())
        authority = parts.netloc.rpartition("@")[2]
        safe = redact.url(url.strip())
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {safe!r}")
        if "@" in parts.path + parts.query + parts.fragment:
            # A `/`, `?` or `#` in a password ends the authority there: the rest would be sent as a path.
            raise ValueError(f"'@' after the host in {safe!r}: percent-encode a '/', '?' or '#' in a user name "
                             "or password (%2F, %3F, %23)")
        if parts.query or parts.fragment:
            raise ValueError(f"a base URL has no query or fragment: {safe!r}")
        try:
            port = parts.port or DEFAULT_PORTS[parts.scheme]
        except ValueError as exc:
            raise ValueError(f"bad port in {safe!r}") from exc
        path = parts.path.rstrip("/")
        root = path.removesuffix("/v1") if path.endswith("/v1") else path
        token = None
        if parts.password:
            token = unquote(parts.password)
        elif parts.username:
            token = unquote(parts.username)
        redact.remember(token)
        return cls(scheme=parts.scheme, host=parts.hostname, port=port, authority=authority, root=root,
                   display=f"{parts.scheme}://{authority}{path}", token=token)

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.authority}"

    @property
    def host_port(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        return is_loopback(self.host)

    def path(self, server_path: str) -> str:
        """The request target (origin-form) of a server path such as `/v1/models` or `/health`."""
        return self.root + server_path

    def absolute(self, server_path: str) -> str:
        """The absolute-form target, for a request through a forward proxy."""
        return self.origin + self.root + server_path


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    return host in LOOPBACK_NAMES or host.startswith("127.") or host.endswith(".localhost")
