"""Proof that each test server in tests/servers misbehaves exactly as its mode says, checked with raw sockets,
`http.client` and `ssl` from the standard library (never the project's client)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import gzip
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.servers import chatwire
from tests.servers.harness import REPO, RunningServer, ServerGroup, ServerStartError, start_oddserver
from tests.servers.rawhttp import Raw, dechunk, exchange, parse_raw, request_bytes, sse_data
from tests.servers.tlsfiles import TLSFiles

pytestmark = pytest.mark.timeout(20)

CHAT = {"model": chatwire.MODEL, "messages": [{"role": "user", "content": "What is six times seven?"}],
        "stream": True, "stream_options": {"include_usage": True}}


def check_answer(datas: list[str], *, usage_chunk: bool = True) -> list[dict[str, Any]]:
    """The stream carries the fixed answer, finish "stop", usage and [DONE] last; returns the objects."""
    assert datas[-1] == "[DONE]"
    objs = [json.loads(d) for d in datas[:-1]]
    deltas = [o["choices"][0]["delta"] for o in objs if o["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == chatwire.REASONING_TEXT
    assert "".join(d.get("content", "") for d in deltas) == chatwire.CONTENT_TEXT
    assert [o["choices"][0]["finish_reason"] for o in objs if o["choices"]][-1] == "stop"
    if usage_chunk:
        assert objs[-1]["choices"] == []
        assert objs[-1]["usage"]["completion_tokens"] == 12
        assert objs[-1]["usage"]["total_tokens"] == objs[-1]["usage"]["prompt_tokens"] + 12
    return objs


def chat_raw(srv: RunningServer, body: Any = CHAT, **kw: Any) -> Raw:
    return parse_raw(exchange(srv.port, request_bytes("POST", "/v1/chat/completions", body, **kw)))


def stream_datas(srv: RunningServer) -> list[str]:
    resp = chat_raw(srv)
    assert resp.status == 200 and resp.header("Transfer-Encoding") == "chunked"
    data, done = dechunk(resp.body)
    assert done
    return sse_data(data)


# ---- oddserver modes ----------------------------------------------------------------------------------


def test_normal_streams_chunked_and_keeps_the_connection(servers: ServerGroup) -> None:
    srv = servers.oddserver("normal")
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=3)
    for _ in range(2):
        conn.request("POST", "/v1/chat/completions", json.dumps(CHAT), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
        assert resp.getheader("Content-Type") == "text/event-stream"
        check_answer(sse_data(resp.read()))
    conn.request("GET", "/v1/models")
    models = json.loads(conn.getresponse().read())
    assert models["data"][0] | {"created": 0, "root": ""} == {
        "id": chatwire.MODEL, "object": "model", "owned_by": "sglang", "max_model_len": 262144, "created": 0,
        "root": ""}
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    conn.close()
    records = srv.log_records()
    assert [(r["conn"], r["n_on_conn"]) for r in records] == [(1, 1), (1, 2), (1, 3), (1, 4)]
    assert records[0]["json"]["stream"] is True


def test_non_streaming_answer_is_a_chat_completion(servers: ServerGroup) -> None:
    resp = chat_raw(servers.oddserver(), {**CHAT, "stream": False})
    obj = json.loads(resp.body)
    assert resp.header("Content-Length") == str(len(resp.body))
    assert obj["object"] == "chat.completion"
    assert obj["choices"][0]["message"]["content"] == chatwire.CONTENT_TEXT
    assert obj["choices"][0]["message"]["reasoning_content"] == chatwire.REASONING_TEXT
    assert obj["usage"]["completion_tokens"] == 12


def test_max_tokens_cuts_the_answer_with_length(servers: ServerGroup) -> None:
    obj = json.loads(chat_raw(servers.oddserver(), {**CHAT, "stream": False, "max_tokens": 3}).body)
    assert obj["choices"][0]["finish_reason"] == "length"
    assert obj["choices"][0]["message"]["reasoning_content"] == "".join(chatwire.REASONING_PIECES[:2])
    assert obj["usage"]["completion_tokens"] == 4


def test_http10_close_ends_the_body_at_close(servers: ServerGroup) -> None:
    srv = servers.oddserver("http10_close")
    # The request asks for keep-alive; the server closes anyway (exchange would time out otherwise).
    resp = chat_raw(srv, close=False)
    assert resp.status_line.startswith("HTTP/1.0 200")
    assert resp.header("Connection") == "close"
    assert resp.header("Content-Length") is None and resp.header("Transfer-Encoding") is None
    check_answer(sse_data(resp.body))


def test_content_length_sends_the_whole_stream_sized(servers: ServerGroup) -> None:
    resp = chat_raw(servers.oddserver("content_length"))
    assert resp.header("Transfer-Encoding") is None
    assert resp.header("Content-Length") == str(len(resp.body))
    check_answer(sse_data(resp.body))


def test_crlf_uses_crlf_everywhere(servers: ServerGroup) -> None:
    srv = servers.oddserver("crlf")
    data, _ = dechunk(chat_raw(srv).body)
    assert b"\r\n\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    check_answer(sse_data(data))


def test_comments_events_adds_comment_and_event_lines(servers: ServerGroup) -> None:
    data, _ = dechunk(chat_raw(servers.oddserver("comments_events")).body)
    assert data.startswith(b": keep-alive\n\n")
    assert data.count(b"event: message\n") == data.count(b"data: ") > 5
    check_answer(sse_data(data))


def test_multiline_data_splits_each_json_event(servers: ServerGroup) -> None:
    data, _ = dechunk(chat_raw(servers.oddserver("multiline_data")).body)
    first_event = data.split(b"\n\n")[0]
    assert first_event.count(b"data:") > 3
    with pytest.raises(json.JSONDecodeError):
        json.loads(first_event.split(b"\n")[0][5:])
    check_answer(sse_data(data))


def test_no_done_ends_with_the_chunk_terminator(servers: ServerGroup) -> None:
    resp = chat_raw(servers.oddserver("no_done"))
    data, done = dechunk(resp.body)
    datas = sse_data(data)
    assert done and "[DONE]" not in datas
    check_answer([*datas, "[DONE]"])


def test_usage_on_finish_has_no_separate_usage_chunk(servers: ServerGroup) -> None:
    objs = check_answer(stream_datas(servers.oddserver("usage_on_finish")), usage_chunk=False)
    assert all(o["choices"] for o in objs)
    assert objs[-1]["choices"][0]["finish_reason"] == "stop" and objs[-1]["usage"]["completion_tokens"] == 12


def test_gzip_ignores_accept_encoding_identity(servers: ServerGroup) -> None:
    srv = servers.oddserver("gzip")
    resp = chat_raw(srv)
    assert resp.header("Content-Encoding") == "gzip"
    data, done = dechunk(resp.body)
    assert done and data[:2] == b"\x1f\x8b"
    check_answer(sse_data(gzip.decompress(data)))
    models = parse_raw(exchange(srv.port, request_bytes("GET", "/v1/models")))
    assert json.loads(gzip.decompress(models.body))["data"][0]["id"] == chatwire.MODEL


def test_html200_answers_chat_with_a_login_page(servers: ServerGroup) -> None:
    srv = servers.oddserver("html200")
    resp = chat_raw(srv)
    assert resp.status == 200 and (resp.header("Content-Type") or "").startswith("text/html")
    assert b"<html>" in resp.body
    assert parse_raw(exchange(srv.port, request_bytes("GET", "/v1/models"))).header("Content-Type") == \
        "application/json"
    every = servers.oddserver("html200_all")
    assert b"<html>" in parse_raw(exchange(every.port, request_bytes("GET", "/v1/models"))).body


def test_continue100_sends_the_interim_response_first(servers: ServerGroup) -> None:
    raw = exchange(servers.oddserver("continue100").port, request_bytes("POST", "/v1/chat/completions", CHAT))
    assert raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    check_answer(sse_data(dechunk(parse_raw(raw[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]).body)[0]))


def test_expect_100_continue_is_honoured_in_every_mode(servers: ServerGroup) -> None:
    srv = servers.oddserver()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=3) as sock:
        full = request_bytes("POST", "/v1/chat/completions", CHAT, {"Expect": "100-continue"})
        head, _, body = full.partition(b"\r\n\r\n")
        sock.sendall(head + b"\r\n\r\n")
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        assert sock.recv(100).startswith(b"HTTP/1.1 200 OK")


def test_bad_chunk_crlf_breaks_the_framing(servers: ServerGroup) -> None:
    resp = chat_raw(servers.oddserver("bad_chunk_crlf"), close=False)  # closed by the server regardless
    with pytest.raises(ValueError, match="not followed by CRLF"):
        dechunk(resp.body)
    assert b'" about the question"},"logprobs":null,"finish_reason":null}]}\n\n' in resp.body


def test_repeated_headers_repeat(servers: ServerGroup) -> None:
    srv = servers.oddserver("repeated_headers")
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=3)
    conn.request("GET", "/v1/models")
    resp = conn.getresponse()
    assert resp.msg.get_all("Set-Cookie") == ["a=1; Path=/", "b=2; Path=/"]
    assert resp.msg.get_all("X-Test") == ["one", "two"]
    conn.close()


def test_health404_and_health_slow(servers: ServerGroup) -> None:
    gone = servers.oddserver("health404")
    assert parse_raw(exchange(gone.port, request_bytes("GET", "/health"))).status == 404
    assert parse_raw(exchange(gone.port, request_bytes("GET", "/v1/models"))).status == 200
    # A delay far above any stall of a loaded machine: /v1/models must answer well inside it.
    delay = 5.0
    slow = servers.oddserver("health_slow", extra=("--health-delay", str(delay)))
    # /health is asked first and is still unanswered when /v1/models has answered: only /health waits.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        health = pool.submit(exchange, slow.port, request_bytes("GET", "/health"), timeout=delay * 6)
        assert parse_raw(exchange(slow.port, request_bytes("GET", "/v1/models"))).status == 200
        assert not health.done(), "/health answered before its delay"
        assert parse_raw(health.result()).status == 200
        assert time.monotonic() - started >= delay  # a lower bound: a slow machine cannot make it fail


@pytest.mark.parametrize("mode", ["strict400", "strict422"])
def test_strict_servers_refuse_unknown_fields(servers: ServerGroup, mode: str) -> None:
    srv = servers.oddserver(mode)
    refused = chat_raw(srv, {**CHAT, "top_k": 20, "min_p": 0.0})
    assert refused.status == int(mode[-3:])
    detail = json.loads(refused.body)["detail"]
    if mode == "strict400":
        assert detail == "Unexpected fields in the request: {'min_p', 'top_k'}"
    else:
        assert [d["loc"] for d in detail] == [["body", "min_p"], ["body", "top_k"]]
    check_answer(stream_datas(srv))
    assert [sorted(r["json"]) for r in srv.log_records()] == [sorted([*CHAT, "top_k", "min_p"]), sorted(CHAT)]


def test_mid_error_sends_an_error_event(servers: ServerGroup) -> None:
    srv = servers.oddserver("mid_error")
    datas = stream_datas(srv)
    assert datas[-1] == "[DONE]"
    error = json.loads(datas[-2])["error"]
    assert error["code"] == 500 and error["message"]
    assert json.loads(datas[-3])["choices"][0]["delta"] == {"content": chatwire.CONTENT_PIECES[0]}
    assert chat_raw(srv, {**CHAT, "stream": False}).status == 500


def test_stall_goes_silent_after_the_first_reasoning_chunk(servers: ServerGroup) -> None:
    srv = servers.oddserver("stall")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=3) as sock:
        sock.sendall(request_bytes("POST", "/v1/chat/completions", CHAT))
        got = b""
        while b"Let me think" not in got:
            got += sock.recv(65536)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(65536)


def test_drop_mid_aborts_without_terminator(servers: ServerGroup) -> None:
    resp = chat_raw(servers.oddserver("drop_mid"))
    data, done = dechunk(resp.body)
    assert not done
    assert chatwire.CONTENT_PIECES[0].encode() in data and chatwire.CONTENT_PIECES[1].encode() not in data


def test_modes_combine_and_conflicts_are_refused(servers: ServerGroup) -> None:
    srv = servers.oddserver("crlf,comments_events", "gzip", "content_length")
    resp = chat_raw(srv)
    body = gzip.decompress(resp.body)
    assert resp.header("Content-Length") == str(len(resp.body)) and b"\r\nevent: message\r\n" in body
    check_answer(sse_data(body))
    with pytest.raises(ServerStartError, match="cannot be combined"):
        servers.oddserver("strict400", "strict422")


def test_prefix_moves_every_route(servers: ServerGroup) -> None:
    srv = servers.oddserver(prefix="/api/x")
    assert parse_raw(exchange(srv.port, request_bytes("GET", "/api/x/v1/models"))).status == 200
    assert parse_raw(exchange(srv.port, request_bytes("GET", "/v1/models"))).status == 404
    assert parse_raw(exchange(srv.port, request_bytes("GET", "/api/x/health"))).status == 200


def test_api_key_and_the_log_of_headers(servers: ServerGroup) -> None:
    srv = servers.oddserver(extra=("--api-key", "sekret"))
    assert chat_raw(srv).status == 401
    assert chat_raw(srv, headers={"Authorization": "Bearer sekret"}).status == 200
    auth = [dict((k.lower(), v) for k, v in r["headers"]).get("authorization") for r in srv.log_records()]
    assert auth == [None, "Bearer sekret"]


def test_loads_and_metrics_parse(servers: ServerGroup) -> None:
    srv = servers.oddserver()
    loads = json.loads(parse_raw(exchange(srv.port, request_bytes("GET", "/v1/loads"))).body)
    assert loads["loads"][0]["num_running_reqs"] == 0
    chat_raw(srv)
    text = parse_raw(exchange(srv.port, request_bytes("GET", "/metrics"))).body.decode()
    assert 'sglang:generation_tokens_total{model_name="Qwen/Qwen3.6-27B"} 12.0' in text


def test_tls_verifies_with_the_ca_and_fails_without(servers: ServerGroup, tls_files: TLSFiles) -> None:
    srv = servers.oddserver(tls=tls_files)
    assert srv.url.startswith("https://")
    ctx = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    for host in ("127.0.0.1", "localhost"):
        conn = http.client.HTTPSConnection(host, srv.port, context=ctx, timeout=3)
        conn.request("GET", "/v1/models")
        assert conn.getresponse().status == 200
        conn.close()
    bare = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ssl.create_default_context(), timeout=3)
    with pytest.raises(ssl.SSLCertVerificationError):
        bare.request("GET", "/v1/models")
    bare.close()


def test_ready_file_and_start_failure(servers: ServerGroup, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    srv = servers.oddserver(extra=("--ready-file", str(ready)))
    assert ready.read_text().strip() == str(srv.port)
    with pytest.raises(ServerStartError, match="unknown mode"):
        servers.oddserver("no_such_mode")


# ---- proxies ------------------------------------------------------------------------------------------


def test_reverse_proxy_strips_the_prefix_and_streams(servers: ServerGroup) -> None:
    up = servers.oddserver()
    proxy = servers.reverse_proxy(up, "/api/x")
    assert parse_raw(exchange(proxy.port, request_bytes("GET", "/api/x/v1/models"))).status == 200
    resp = parse_raw(exchange(proxy.port, request_bytes("POST", "/api/x/v1/chat/completions", CHAT)))
    assert resp.header("Transfer-Encoding") == "chunked"
    check_answer(sse_data(dechunk(resp.body)[0]))
    assert parse_raw(exchange(proxy.port, request_bytes("GET", "/v1/models"))).status == 404
    assert [r["path"] for r in up.log_records()] == ["/v1/models", "/v1/chat/completions"]
    assert [(r["kind"], r["path"]) for r in proxy.log_records()] == [
        ("reverse", "/api/x/v1/models"), ("reverse", "/api/x/v1/chat/completions"), ("rejected", "/v1/models")]


def test_reverse_proxy_passes_events_through_unbuffered(servers: ServerGroup) -> None:
    proxy = servers.reverse_proxy(servers.oddserver("stall"), "/p")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=3) as sock:
        sock.sendall(request_bytes("POST", "/p/v1/chat/completions", CHAT))
        got = b""
        while b"Let me think" not in got:  # the upstream never finishes: only unbuffered relaying gets here
            got += sock.recv(65536)


def test_reverse_proxy_keeps_the_client_connection(servers: ServerGroup) -> None:
    proxy = servers.reverse_proxy(servers.oddserver(), "/p")
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=3)
    for _ in range(2):
        conn.request("POST", "/p/v1/chat/completions", json.dumps(CHAT))
        check_answer(sse_data(conn.getresponse().read()))
    conn.close()
    assert [r["conn"] for r in proxy.log_records()] == [1, 1]


def test_forward_proxy_carries_absolute_form(servers: ServerGroup) -> None:
    up = servers.oddserver()
    proxy = servers.forward_proxy()
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=3)
    conn.request("POST", f"{up.url}/v1/chat/completions", json.dumps(CHAT))
    check_answer(sse_data(conn.getresponse().read()))
    conn.close()
    (record,) = proxy.log_records()
    assert (record["kind"], record["method"], record["target"]) == ("forward", "POST",
                                                                    f"{up.url}/v1/chat/completions")
    assert [r["target"] for r in up.log_records()] == ["/v1/chat/completions"]


def test_forward_proxy_tunnels_https_with_connect(servers: ServerGroup, tls_files: TLSFiles) -> None:
    up = servers.oddserver(tls=tls_files)
    proxy = servers.forward_proxy()
    ctx = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=ctx, timeout=3)
    conn.set_tunnel("127.0.0.1", up.port)
    conn.request("GET", "/v1/models")
    assert json.loads(conn.getresponse().read())["data"][0]["id"] == chatwire.MODEL
    conn.close()
    (record,) = proxy.log_records()
    assert (record["kind"], record["method"], record["target"]) == ("connect", "CONNECT", f"127.0.0.1:{up.port}")
    assert [r["path"] for r in up.log_records()] == ["/v1/models"]


def test_forward_proxy_refuses_non_loopback_and_wants_auth(servers: ServerGroup) -> None:
    proxy = servers.forward_proxy(auth="u:p")
    raw = exchange(proxy.port, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n"
                               b"Connection: close\r\n\r\n")
    assert parse_raw(raw).status == 403
    up = servers.oddserver()
    target = f"{up.url}/health"
    assert parse_raw(exchange(proxy.port, request_bytes("GET", target))).status == 407
    ok = exchange(proxy.port, request_bytes("GET", target, headers={"Proxy-Authorization": "Basic dTpw"}))
    assert parse_raw(ok).status == 200
    assert [r["kind"] for r in proxy.log_records()] == ["rejected", "rejected", "forward"]


def test_refusing_proxy_closes_at_once(servers: ServerGroup) -> None:
    proxy = servers.forward_proxy(refuse=True)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        assert exchange(proxy.port, request_bytes("GET", "http://127.0.0.1:9/")) == b""
    assert [r["kind"] for r in proxy.log_records()] == ["refused"]


# ---- harness ------------------------------------------------------------------------------------------

_ORPHAN = """
import sys, threading
from tests.servers.rawhttp import Raw, dechunk, exchange, parse_raw, request_bytes, sse_data
from tests.servers.harness import start_oddserver
box = []
if sys.argv[1] == "thread":  # no PDEATHSIG from a worker thread: only the stdin pipe can end the server
    t = threading.Thread(target=lambda: box.append(start_oddserver()))
    t.start(); t.join()
else:
    box.append(start_oddserver())
print(box[0].proc.pid, flush=True)
sys.stdin.read()
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("where", ["main", "thread"])
def test_servers_die_with_the_test_process(where: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN, where], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    assert not _gone(pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 3
    while not _gone(pid):
        assert time.monotonic() < deadline, "server outlived its parent"
        time.sleep(0.02)


def test_stop_reads_the_log_after_the_temporary_directory_is_gone() -> None:
    with start_oddserver() as srv:
        exchange(srv.port, request_bytes("GET", "/health"))
    assert not srv.alive
    assert [r["path"] for r in srv.log_records()] == ["/health"]
