"""Pure parts of the wire layer, table-driven: base URLs (root, display, credentials) and the proxy
decision (explicit --proxy, the environment, NO_PROXY, loopback)."""

from __future__ import annotations

import pytest

from client.core.errors import ConfigError
from client.wire.connect import NetworkOptions, choose_proxy, route_for
from client.wire.http1 import Headers
from client.wire.urls import ServerURL

URLS = [
    # given, root, display, path("/v1/models"), token
    ("http://h:30000", "", "http://h:30000", "/v1/models", None),
    ("http://h:30000/", "", "http://h:30000", "/v1/models", None),
    ("http://h:30000/v1", "", "http://h:30000/v1", "/v1/models", None),
    ("http://h:30000/v1/", "", "http://h:30000/v1", "/v1/models", None),
    ("http://h/api/x", "/api/x", "http://h/api/x", "/api/x/v1/models", None),
    ("http://h/api/x/v1/", "/api/x", "http://h/api/x/v1", "/api/x/v1/models", None),
    ("https://h/api/v1x", "/api/v1x", "https://h/api/v1x", "/api/v1x/v1/models", None),
    ("http://user:k%40y@h:1/v1", "", "http://h:1/v1", "/v1/models", "k@y"),
    ("http://:key@h:1", "", "http://h:1", "/v1/models", "key"),
    ("http://tokenonly@h:1", "", "http://h:1", "/v1/models", "tokenonly"),
    ("http://[::1]:8000/v1", "", "http://[::1]:8000/v1", "/v1/models", None),
]


@pytest.mark.parametrize(("given", "root", "display", "models", "token"), URLS, ids=[u[0] for u in URLS])
def test_base_urls(given: str, root: str, display: str, models: str, token: str | None) -> None:
    url = ServerURL.parse(given)
    assert (url.root, url.display, url.path("/v1/models"), url.token) == (root, display, models, token)
    assert url.path("/health") == root + "/health"
    assert "@" not in url.display and "@" not in url.authority and "@" not in repr(url)


def test_default_ports_and_absolute_form() -> None:
    assert ServerURL.parse("https://h").port == 443
    assert ServerURL.parse("http://h").port == 80
    assert ServerURL.parse("http://h:9/api/v1").absolute("/health") == "http://h:9/api/health"


@pytest.mark.parametrize("bad", ["ftp://h", "h:30000", "http://", "http://u:secret@h/?q=1"])
def test_bad_base_urls_never_show_credentials(bad: str) -> None:
    with pytest.raises(ValueError) as raised:
        ServerURL.parse(bad)
    assert "secret" not in str(raised.value)


PROXY = "http://proxy.example:3128"
DECISIONS = [
    # target, --proxy, environment, chosen
    ("http://gpu1:30000", None, {}, None),
    ("http://gpu1:30000", None, {"HTTP_PROXY": PROXY}, PROXY),
    ("http://gpu1:30000", None, {"http_proxy": PROXY}, PROXY),
    ("https://gpu1", None, {"HTTP_PROXY": PROXY}, None),
    ("https://gpu1", None, {"HTTPS_PROXY": PROXY}, PROXY),
    ("https://gpu1", None, {"ALL_PROXY": PROXY}, PROXY),
    ("http://gpu1:30000", None, {"HTTP_PROXY": PROXY, "NO_PROXY": "gpu1"}, None),
    ("http://gpu1.cluster:30000", None, {"HTTP_PROXY": PROXY, "no_proxy": ".cluster"}, None),
    ("http://gpu2:30000", None, {"HTTP_PROXY": PROXY, "NO_PROXY": "gpu1"}, PROXY),
    ("http://gpu1:30000", None, {"HTTP_PROXY": PROXY, "NO_PROXY": "*"}, None),
    ("http://127.0.0.1:30000", None, {"HTTP_PROXY": PROXY}, None),
    ("http://localhost:30000", None, {"HTTP_PROXY": PROXY}, None),
    ("http://[::1]:30000", None, {"HTTP_PROXY": PROXY}, None),
    ("http://127.0.0.1:30000", PROXY, {}, PROXY),
    ("http://gpu1:30000", PROXY, {"NO_PROXY": "gpu1"}, PROXY),
    ("http://gpu1:30000", "none", {"HTTP_PROXY": PROXY}, None),
]


@pytest.mark.parametrize(("target", "option", "env", "chosen"), DECISIONS)
def test_proxy_decision(monkeypatch: pytest.MonkeyPatch, target: str, option: str | None, env: dict[str, str],
                        chosen: str | None) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert choose_proxy(ServerURL.parse(target), option) == chosen


def test_proxy_route_credentials_and_refusals() -> None:
    route = route_for(ServerURL.parse("http://gpu1:1"), NetworkOptions(proxy="http://me:p%40ss@proxy:3128"))
    assert route.proxy is not None and route.proxy.display == "http://proxy:3128"
    assert route.proxy_header == "Proxy-Authorization: Basic bWU6cEBzcw==\r\n"  # me:p@ss
    assert "p%40ss" not in repr(route)
    bare = route_for(ServerURL.parse("http://gpu1:1"), NetworkOptions(proxy="proxy:3128")).proxy  # host:port alone
    assert bare is not None and bare.display == "http://proxy:3128"
    with pytest.raises(ConfigError, match="only http:// proxies"):
        route_for(ServerURL.parse("http://gpu1:1"), NetworkOptions(proxy="https://proxy:3128"))


def test_missing_ca_bundle_is_a_config_error(tmp_path: object) -> None:
    with pytest.raises(ConfigError, match=r"--ca-bundle /nonexistent/ca\.pem: cannot load CA certificates"):
        route_for(ServerURL.parse("https://h"), NetworkOptions(ca_bundle="/nonexistent/ca.pem"))


def test_headers_keep_repeats() -> None:
    headers = Headers([("set-cookie", "a=1"), ("x", "1"), ("set-cookie", "b=2")])
    assert headers.get("set-cookie") == "a=1"
    assert headers.get_all("set-cookie") == ["a=1", "b=2"]
    assert "x" in headers and "y" not in headers
    assert headers.get("y", "d") == "d"
    with pytest.raises(KeyError):
        headers["y"]
