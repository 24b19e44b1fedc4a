"""Wire conformance: the client's real Endpoint (stream_chat and the control-plane GETs) against servers
that misbehave on purpose (tests/servers): HTTP/1.0, Content-Length bodies, CRLF and comment-laden SSE,
multi-line data, no [DONE], usage on the finish chunk, gzip, 100 Continue, repeated headers, an HTML login
page, broken chunk framing, TLS with a test CA, reverse proxies with a path prefix, forward proxies (and
dead ones), credentials in the URL.

Every row expects either the server's fixed answer exactly (tests/servers/chatwire.py) or an error whose
text names the cause, so a regression to a vague "cannot reach" fails.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.errors import (
    AttemptError,
    ConnectFailed,
    NotEventStream,
    NotJSON,
    ProtocolError,
    ProxyFailed,
    RequestRejected,
    StreamStalled,
    TLSCertificateError,
)
from client.core.records import Completion
from client.fleet.kinds import metric_families
from client.wire.connect import NetworkOptions, ssl_context
from client.wire.endpoint import Endpoint
from client.wire.loads import parse_metrics, parse_v1_loads
from client.wire.transport import StreamingTransport
from tests.conftest import make_prompts, read_failures, read_results, run_client
from tests.servers import chatwire
from tests.servers.harness import RunningServer, ServerGroup
from tests.servers.tlsfiles import TLSFiles

BODY = {"model": chatwire.MODEL, "messages": [{"role": "user", "content": "What is six times seven?"}],
        "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 64}
PAYLOAD = orjson.dumps(BODY)
ANSWER = chatwire.answer_for(BODY)


def endpoint(url: str, **kw: Any) -> Endpoint:
    return Endpoint(url, index=0, max_in_flight=4, idle_timeout=10.0, **kw)


def assert_whole(completion: Completion) -> None:
    assert completion.reasoning == chatwire.REASONING_TEXT
    assert completion.content == chatwire.CONTENT_TEXT
    assert completion.finish_reason == ANSWER.finish == "stop"
    assert completion.usage == ANSWER.usage()
    assert completion.model == chatwire.MODEL


async def exercise(ep: Endpoint, streams: int = 2) -> None:
    """Streams (twice: the second may reuse the connection) and every control-plane GET, all answered."""
    for _ in range(streams):
        completion, ttft = await ep.stream_chat(PAYLOAD)
        assert_whole(completion)
        assert ttft is not None
    assert await ep.health() == 200
    assert await ep.models() == [chatwire.MODEL]
    assert parse_v1_loads(await ep.get_bytes("/v1/loads")).running == 0
    assert parse_metrics(await ep.get_bytes("/metrics"), metric_families()).running == 0


def chat_records(server: RunningServer) -> list[dict[str, Any]]:
    return [r for r in server.log_records() if r.get("method") == "POST"]


def header(record: dict[str, Any], name: str) -> list[str]:
    return [value for key, value in record["headers"] if key.lower() == name]


GOOD_MODES = [
    "normal", "http10_close", "content_length", "crlf", "comments_events", "multiline_data", "no_done",
    "usage_on_finish", "gzip", "continue100", "repeated_headers",
    "crlf,comments_events,multiline_data,no_done,usage_on_finish",
    "http10_close,gzip,crlf", "content_length,gzip,multiline_data", "gzip,continue100,repeated_headers",
]


@pytest.mark.parametrize("modes", GOOD_MODES)
async def test_odd_but_valid_servers_give_the_whole_answer(servers: ServerGroup, modes: str) -> None:
    server = servers.oddserver(*modes.split(","))
    ep = endpoint(server.url)
    try:
        await exercise(ep)
    finally:
        await ep.aclose()
    posts = chat_records(server)
    assert len(posts) == 2
    assert all(header(r, "accept-encoding") == ["identity"] for r in posts)
    if modes in ("normal", "crlf"):  # keep-alive: the second stream went over the first one's connection
        assert [r["n_on_conn"] for r in posts] == [1, 2]


async def test_control_plane_polls_reuse_one_connection(servers: ServerGroup) -> None:
    """GETs ride the streams' keep-alive pool: a poll a second does not open a connection a second."""
    server = servers.oddserver()
    ep = endpoint(server.url)
    try:
        for _ in range(3):
            assert await ep.health() == 200
            assert parse_v1_loads(await ep.get_bytes("/v1/loads")).running == 0
        await ep.stream_chat(PAYLOAD)
        assert await ep.models() == [chatwire.MODEL]
    finally:
        await ep.aclose()
    records = server.log_records()
    assert [r["n_on_conn"] for r in records] == list(range(1, 9))
    assert len({r["conn"] for r in records}) == 1
    gets = [r for r in records if r["method"] == "GET"]
    assert all(header(r, "accept-encoding") == ["identity"] and not header(r, "content-type") for r in gets)
    assert header(chat_records(server)[0], "accept") == ["text/event-stream"]


async def test_a_get_that_never_ends_is_cut_at_its_limit(servers: ServerGroup) -> None:
    """A body that keeps coming (one byte a pause, never whole) does not hold a poll: the deadline ends it."""
    ep = endpoint(servers.oddserver("loads_dribble").url)
    try:
        with pytest.raises(StreamStalled, match=r"no whole answer from http://127\.0\.0\.1:\d+/v1/loads within 1s"):
            await ep.get_bytes("/v1/loads", limit_s=1.0)
        assert await ep.health() == 200  # the cut connection is not reused
    finally:
        await ep.aclose()


async def test_repeated_headers_are_all_kept(servers: ServerGroup) -> None:
    server = servers.oddserver("repeated_headers")
    transport = StreamingTransport(server.url, headers={"content-type": "application/json"})
    try:
        response = await transport.post("/v1/chat/completions", PAYLOAD, lambda _: None, idle_timeout=10)
    finally:
        transport.close()
    assert response.headers.get_all("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]
    assert response.headers.get_all("x-test") == ["one", "two"]
    assert response.headers["content-type"] == "text/event-stream"


ERRORS = [
    ("html200", NotEventStream, r"answered 200 with Content-Type text/html; charset=utf-8, not text/event-stream"
                                r".*<!DOCTYPE html>"),
    ("bad_chunk_crlf", ProtocolError, r"malformed HTTP response from http://127\.0\.0\.1:\d+: .*"),
]


@pytest.mark.parametrize(("mode", "kind", "pattern"), ERRORS, ids=[e[0] for e in ERRORS])
async def test_broken_answers_fail_with_their_cause(servers: ServerGroup, mode: str, kind: type[AttemptError],
                                                    pattern: str) -> None:
    ep = endpoint(servers.oddserver(mode).url)
    try:
        with pytest.raises(kind, match=pattern):
            await ep.stream_chat(PAYLOAD)
        assert await ep.models() == [chatwire.MODEL]  # the control plane of these servers is fine
    finally:
        await ep.aclose()


async def test_html_everywhere_names_the_page(servers: ServerGroup) -> None:
    ep = endpoint(servers.oddserver("html200_all").url)
    try:
        with pytest.raises(NotJSON, match=r"/v1/models answered 200 with Content-Type text/html.*<!DOCTYPE html>"):
            await ep.models()
        with pytest.raises(NotEventStream, match="text/html"):
            await ep.stream_chat(PAYLOAD)
    finally:
        await ep.aclose()


# -- base URLs and path prefixes ---------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_base_url_with_or_without_v1(servers: ServerGroup, suffix: str) -> None:
    server = servers.oddserver()
    ep = endpoint(server.url + suffix)
    try:
        await exercise(ep, streams=1)
        assert ep.url == (server.url + suffix).rstrip("/")
    finally:
        await ep.aclose()
    assert {r["path"] for r in server.log_records()} == {
        "/v1/chat/completions", "/health", "/v1/models", "/v1/loads", "/metrics"}


@pytest.mark.parametrize("suffix", ["/api/x", "/api/x/", "/api/x/v1", "/api/x/v1/"])
async def test_reverse_proxy_path_prefix(servers: ServerGroup, suffix: str) -> None:
    upstream = servers.oddserver()
    proxy = servers.reverse_proxy(upstream, "/api/x")
    ep = endpoint(proxy.url + suffix)
    try:
        await exercise(ep)
    finally:
        await ep.aclose()
    carried = proxy.log_records()
    assert {r["kind"] for r in carried} == {"reverse"}
    assert {r["path"] for r in carried} == {
        "/api/x/v1/chat/completions", "/api/x/health", "/api/x/v1/models", "/api/x/v1/loads", "/api/x/metrics"}


async def test_server_with_its_own_prefix(servers: ServerGroup) -> None:
    server = servers.oddserver(prefix="/api/x")
    ep = endpoint(server.url + "/api/x/v1")
    try:
        await exercise(ep, streams=1)
    finally:
        await ep.aclose()


# -- credentials in the URL --------------------------------------------------------------------------------

async def test_url_credentials_become_a_bearer_token_and_stay_secret(servers: ServerGroup) -> None:
    server = servers.oddserver(extra=("--api-key", "s3cr3t-key"))
    url = server.url.replace("://", "://someone:s3cr3t-key@") + "/v1"
    ep = Endpoint(url, max_in_flight=2)
    try:
        await exercise(ep, streams=1)
        assert ep.url == server.url + "/v1"
        assert "s3cr3t" not in repr(ep.server) + repr(ep.route)
    finally:
        await ep.aclose()
    posts = chat_records(server)
    assert header(posts[0], "authorization") == ["Bearer s3cr3t-key"]
    # A wrong key is refused by the server; the refusal and a dead port's error do not show the key.
    wrong = endpoint(server.url.replace("://", "://:wrong-key@"))
    dead = endpoint(f"http://u:s3cr3t-key@127.0.0.1:{free_port()}")
    try:
        with pytest.raises(RequestRejected, match="401") as refused:
            await wrong.stream_chat(PAYLOAD)
        with pytest.raises(ConnectFailed) as unreachable:
            await dead.stream_chat(PAYLOAD)
        assert await dead.health() is None
        texts = [str(refused.value), str(unreachable.value), str(dead.last_error), dead.url, wrong.url]
        assert not [t for t in texts if "wrong-key" in t or "s3cr3t" in t]
    finally:
        await wrong.aclose()
        await dead.aclose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- TLS ---------------------------------------------------------------------------------------------------

async def test_tls_with_the_test_ca(servers: ServerGroup, tls_files: TLSFiles) -> None:
    server = servers.oddserver(tls=tls_files)
    ep = endpoint(server.url, network=NetworkOptions(ca_bundle=str(tls_files.ca_cert)))
    try:
        await exercise(ep)
    finally:
        await ep.aclose()


async def test_tls_untrusted_certificate_is_named(servers: ServerGroup, tls_files: TLSFiles) -> None:
    server = servers.oddserver(tls=tls_files)
    ep = endpoint(server.url)
    pattern = (rf"TLS certificate of 127\.0\.0\.1:{server.port} not trusted: .*certificate.*; "
               r"pass --ca-bundle FILE or set SSL_CERT_FILE")
    try:
        with pytest.raises(TLSCertificateError, match=pattern):
            await ep.stream_chat(PAYLOAD)
        with pytest.raises(TLSCertificateError, match=pattern):
            await ep.models()
        assert await ep.health() is None
        assert isinstance(ep.last_error, TLSCertificateError)
    finally:
        await ep.aclose()


async def test_tls_insecure_works_and_warns_once(servers: ServerGroup, tls_files: TLSFiles,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    server = servers.oddserver(tls=tls_files)
    ssl_context.cache_clear()
    eps = [endpoint(server.url, network=NetworkOptions(insecure=True)) for _ in range(2)]
    try:
        for ep in eps:
            await exercise(ep, streams=1)
    finally:
        for ep in eps:
            await ep.aclose()
    assert capsys.readouterr().err.count("warning: --insecure") == 1


async def test_ssl_cert_file_is_honoured(servers: ServerGroup, tls_files: TLSFiles,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    server = servers.oddserver(tls=tls_files)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files.ca_cert))
    ssl_context.cache_clear()
    ep = endpoint(server.url)
    try:
        await exercise(ep, streams=1)
    finally:
        await ep.aclose()
        ssl_context.cache_clear()


# -- forward proxies -------------------------------------------------------------------------------------

async def test_forward_proxy_carries_every_request(servers: ServerGroup) -> None:
    server = servers.oddserver()
    proxy = servers.forward_proxy()
    ep = endpoint(server.url + "/v1", network=NetworkOptions(proxy=proxy.url))
    try:
        await exercise(ep)
    finally:
        await ep.aclose()
    carried = proxy.log_records()
    assert {r["kind"] for r in carried} == {"forward"}
    base = server.url
    assert {r["target"] for r in carried} == {f"{base}/v1/chat/completions", f"{base}/health",
                                              f"{base}/v1/models", f"{base}/v1/loads", f"{base}/metrics"}
    assert len([r for r in carried if r["method"] == "POST"]) == 2
    assert len(server.log_records()) == len(carried)


async def test_forward_proxy_tunnels_https(servers: ServerGroup, tls_files: TLSFiles) -> None:
    server = servers.oddserver(tls=tls_files)
    proxy = servers.forward_proxy()
    ep = endpoint(server.url, network=NetworkOptions(proxy=proxy.url, ca_bundle=str(tls_files.ca_cert)))
    try:
        await exercise(ep)
    finally:
        await ep.aclose()
    carried = proxy.log_records()
    assert carried and {r["kind"] for r in carried} == {"connect"}
    assert {r["target"] for r in carried} == {f"127.0.0.1:{server.port}"}


async def test_environment_proxy_is_bypassed_for_loopback(servers: ServerGroup,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    server = servers.oddserver()
    proxy = servers.forward_proxy()
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    ep = endpoint(server.url)
    try:
        await exercise(ep, streams=1)
    finally:
        await ep.aclose()
    assert proxy.log_records() == []
    assert len(server.log_records()) == 5


@pytest.mark.parametrize("refuse", [False, True], ids=["nothing listening", "accepts and closes"])
async def test_dead_proxy_is_named(servers: ServerGroup, refuse: bool) -> None:
    server = servers.oddserver()
    proxy_url = servers.forward_proxy(refuse=True).url if refuse else f"http://127.0.0.1:{free_port()}"
    ep = endpoint(server.url, network=NetworkOptions(proxy=proxy_url))
    try:
        with pytest.raises(ProxyFailed, match=rf"proxy {proxy_url}\b"):
            await ep.stream_chat(PAYLOAD)
        with pytest.raises(ProxyFailed, match=rf"proxy {proxy_url}\b"):
            await ep.models()
        assert await ep.health() is None
        assert isinstance(ep.last_error, ProxyFailed)
    finally:
        await ep.aclose()
    assert server.log_records() == []


# -- end to end ------------------------------------------------------------------------------------------

def test_client_run_through_a_prefixed_reverse_proxy(servers: ServerGroup, tmp_path: Path) -> None:
    """`python -m client.run` against an odd server behind a reverse proxy, base URL `.../api/x/v1/`."""
    upstream = servers.oddserver("crlf", "comments_events", "no_done", "usage_on_finish")
    proxy = servers.reverse_proxy(upstream, "/api/x")
    prompts = make_prompts(tmp_path / "prompts.jsonl", 6, with_tools_every=0)
    out = tmp_path / "out"
    base = proxy.url + "/api/x/v1/"
    result = run_client(["--endpoints", base, "--prompts", str(prompts), "--out", str(out),
                         "--max-in-flight", "4", "--max-tokens", "64"], timeout=90)
    assert result.code == 0, result.stderr[-3000:]
    records = read_results(out)
    assert sorted(r["id"] for r in records) == [f"p{i:06d}" for i in range(6)]
    for record in records:
        assert (record["reasoning"], record["content"]) == (chatwire.REASONING_TEXT, chatwire.CONTENT_TEXT)
        assert record["finish_reason"] == "stop"
        assert record["usage"]["completion_tokens"] == ANSWER.completion_tokens
        assert record["endpoint"] == proxy.url + "/api/x/v1"
    carried = {r["path"] for r in proxy.log_records()}
    assert "/api/x/v1/chat/completions" in carried and "/api/x/health" in carried
    assert not read_failures(out)
