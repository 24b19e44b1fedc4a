"""How the client reaches a server: the TLS context, the proxy decision, and opening connections.

One `Route` per endpoint, made by `route_for`, serves every request to it, the streams and the
control-plane GETs alike (both go over client.wire.transport, connected by `open_connection` here).

TLS: the system's trust store (OpenSSL's default paths, so `SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured);
`--ca-bundle FILE` trusts the CAs in FILE instead; `--insecure` skips verification (a warning is printed
once). One context per setting for the whole process.

Proxies, one policy for every request:
- `--proxy URL` sends every request through URL, loopback servers included (you asked for it).
- `--proxy none` never uses a proxy.
- Otherwise the environment decides, as curl reads it: `HTTPS_PROXY` for https servers,
  `HTTP_PROXY` for http ones, `ALL_PROXY` for both, lowercase spellings too, hosts in `NO_PROXY` excepted
  (`urllib.request.getproxies_environment` / `proxy_bypass_environment`). Loopback servers (127.0.0.0/8,
  ::1, localhost) never go through an environment proxy, so a shell's proxy never captures local servers.
For an http server the proxy gets absolute-form requests; for an https server, `CONNECT host:port` and
then TLS with the server through the tunnel. Proxy credentials in the proxy URL become
`Proxy-Authorization: Basic`. Only `http://` proxies are supported.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast
from urllib.parse import unquote, urlsplit

import httptools

from client.core.errors import ConfigError
from client.core.human_out import note
from client.wire.errors_map import CA_BUNDLE, CONNECT, PROXY, Step, mapped, proxy_refused
from client.wire.urls import ServerURL

P = TypeVar("P", bound=asyncio.Protocol)


@dataclass(frozen=True, slots=True)
class NetworkOptions:
    """The run's TLS and proxy settings (`--ca-bundle`, `--insecure`, `--proxy`)."""

    ca_bundle: str | None = None
    insecure: bool = False
    proxy: str | None = None  # None: the environment decides; "none": never; a URL: always


@dataclass(frozen=True, slots=True)
class Route:
    """How to reach one server: through `proxy` (None: directly), with `ssl` for https servers."""

    ssl: ssl.SSLContext
    proxy: ServerURL | None = None
    proxy_header: str = field(default="", repr=False)  # "Proxy-Authorization: Basic ...\r\n" or ""


@functools.cache
def ssl_context(ca_bundle: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    """The TLS context of every connection of the process with these settings (made once)."""
    if insecure:
        note("warning: --insecure: TLS certificates are not verified; anyone in the path can read and alter "
             "the traffic")
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    with mapped(Step(CA_BUNDLE, ca_bundle or "")):
        return ssl.create_default_context(cafile=ca_bundle) if ca_bundle else ssl.create_default_context()


def choose_proxy(server: ServerURL, option: str | None) -> str | None:
    """The proxy URL for requests to `server` under the policy above, or None for a direct connection."""
    if option is not None:
        return None if option.strip().lower() in ("", "none") else option
    if server.is_loopback:
        return None
    proxies = urllib.request.getproxies_environment()
    chosen = proxies.get(server.scheme) or proxies.get("all")
    bypass: Callable[[str, dict[str, str]], bool] = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if not chosen or bypass(server.host, proxies):
        return None
    return chosen


def route_for(server: ServerURL, options: NetworkOptions) -> Route:
    context = ssl_context(options.ca_bundle, options.insecure)
    chosen = choose_proxy(server, options.proxy)
    if chosen is None:
        return Route(context)
    if "://" not in chosen:
        chosen = "http://" + chosen  # HTTP_PROXY=host:port is common
    try:
        proxy = ServerURL.parse(chosen)
    except ValueError as exc:
        raise ConfigError(f"proxy {exc}") from exc
    if proxy.scheme != "http":
        raise ConfigError(f"proxy {proxy.display}: only http:// proxies are supported")
    header = ""
    parts = urlsplit(chosen)
    if parts.username is not None or parts.password is not None:
        userinfo = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        header = f"Proxy-Authorization: Basic {base64.b64encode(userinfo.encode()).decode()}\r\n"
    return Route(context, proxy, header)


async def open_connection(factory: Callable[[], P], server: ServerURL, route: Route,
                          limit_s: float) -> P:
    """A connected protocol from `factory`: direct, through the proxy (http), or tunnelled (https)."""
    loop = asyncio.get_running_loop()
    proxy = route.proxy
    tls = route.ssl if server.scheme == "https" else None
    to_server = Step(CONNECT, server.host_port)
    if proxy is None:
        with mapped(to_server):
            async with asyncio.timeout(limit_s):
                _, protocol = await loop.create_connection(factory, server.host, server.port, ssl=tls,
                                                           server_hostname=server.host if tls else None)
        return protocol
    with mapped(Step(PROXY, server.host_port, proxy=proxy.display)):
        async with asyncio.timeout(limit_s):
            transport, tunnel = await loop.create_connection(_Tunnel, proxy.host, proxy.port)
    if tls is None:  # http: absolute-form requests on this connection
        protocol = factory()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        return protocol
    try:
        with mapped(to_server):
            async with asyncio.timeout(limit_s):
                await tunnel.connect(server.host_port, route.proxy_header, proxy.display)
                secure = await loop.start_tls(transport, tunnel, tls, server_hostname=server.host)
            if secure is None:
                raise ConnectionResetError("the tunnel closed during the TLS handshake")
    except BaseException:
        transport.abort()
        raise
    protocol = factory()
    secure.set_protocol(protocol)
    protocol.connection_made(secure)
    return protocol


class _Tunnel(asyncio.Protocol):
    """A connection to a proxy: sends `CONNECT host:port` and reads the proxy's answer (with httptools)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future[tuple[int, str]] | None = None
        self._reason = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)

    def on_status(self, status: bytes) -> None:
        self._reason += status.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_result((self._parser.get_status_code(), self._reason))

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._answer.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc or ConnectionResetError("the proxy closed the connection"))

    async def connect(self, target: str, proxy_header: str, proxy: str) -> None:
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self.transport.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{proxy_header}\r\n".encode("latin-1"))
        try:
            status, reason = await self._answer
        except OSError:
            raise proxy_refused(proxy, f"CONNECT {target}", None) from None
        except httptools.HttpParserError:
            raise proxy_refused(proxy, f"CONNECT {target}", None, "a malformed answer") from None
        if not 200 <= status < 300:
            raise proxy_refused(proxy, f"CONNECT {target}", status, reason)
