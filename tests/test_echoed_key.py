"""A server that echoes the bearer token in what it generates (tests/servers/echokey.py): the reply's
reasoning, content and tool-call arguments are stored with the token masked, so no byte of the segments,
their sidecars, the failures file or the objects synced to S3 holds it."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson

from client.core.redact import MASK
from tests.conftest import make_prompts, read_results, run_client
from tests.s3_server import BUCKET, S3Server
from tests.servers.harness import ServerGroup

KEY = "sk-live-7f3a9c21e8b4d05f"


def test_a_reply_echoing_the_api_key_is_stored_masked_locally_and_in_s3(servers: ServerGroup, tmp_path: Path,
                                                                        s3: S3Server, s3_prefix: str) -> None:
    server = servers.start("echokey")
    prompts = make_prompts(tmp_path / "p.jsonl", 6)
    out = tmp_path / "out"
    result = run_client(["--endpoints", server.url, "--api-key", KEY, "--prompts", str(prompts), "--out", str(out),
                         "--s3", f"s3://{BUCKET}/{s3_prefix}", "--s3-endpoint-url", s3.url])
    assert result.code == 0, result.stderr
    assert any(r.get("headers") for r in server.log_records()), "the server was asked"
    records = read_results(out)
    assert len(records) == 6
    for record in records:
        assert record["content"] == f"Your key is {MASK}."
        assert record["reasoning"] == f"The header says Bearer {MASK}, so I will repeat it."
        (call,) = record["tool_calls"]
        assert orjson.loads(call["function"]["arguments"]) == {"key": MASK, "note": f"sent with {MASK}"}
    local = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in local)
    for path in local:
        assert KEY.encode() not in path.read_bytes(), path
    stored = s3.keys(BUCKET, s3_prefix)
    assert any("/segments/" in key and ".jsonl" in key for key in stored), stored
    for key in stored:
        body = s3.get(BUCKET, key)
        assert KEY.encode() not in (gzip.decompress(body) if key.endswith(".gz") else body), key
    assert KEY not in result.stderr + result.stdout
