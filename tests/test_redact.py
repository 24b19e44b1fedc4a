"""Secrets stay out of every message on error paths too: the redaction rules (table-driven), the URL
errors they guard, the S3 store's messages, and the run's CLI against a server that echoes the
Authorization header in its error bodies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from client.core import redact
from client.core.errors import ServerError, error_for_status
from client.core.stats import RunStats
from client.engine.result_rows import failure_record
from client.s3.store import S3Store, S3Url
from client.wire.urls import ServerURL
from tests.conftest import make_prompts, read_failures, run_client
from tests.servers.harness import ServerGroup

PW = "Hunter2pw"


@pytest.fixture(autouse=True)
def _fresh_secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in redact.ENV_SECRETS:
        monkeypatch.delenv(name, raising=False)
    redact.forget_all()
    yield
    redact.forget_all()


URLS = [
    # as typed, as shown
    ("http://alice:PW@h:1/v1", "http://***@h:1/v1"),
    ("alice:PW@h:1", "***@h:1"),
    ("http:/alice:PW@h:1", "http:/***@h:1"),
    ("http//alice:PW@h:1", "http//***@h:1"),
    ("http://alice:P/W@h:1", "http://***@h:1"),
    ("http://alice:P#W@h:1", "http://***@h:1"),
    ("http://alice:P?W@h:1", "http://***@h:1"),
    ("http://alice:P@W@h:1", "http://***@h:1"),
    ("http://TOKEN@h", "http://***@h"),
    ("http://h:1/v1", "http://h:1/v1"),
    ("", ""),
]


@pytest.mark.parametrize(("typed", "shown"), URLS, ids=[u[0] or "empty" for u in URLS])
def test_url_masks_userinfo_however_mistyped(typed: str, shown: str) -> None:
    assert redact.url(typed.replace("PW", PW)) == shown


TEXTS = [
    # text, secrets remembered, environment, shown
    ("cannot reach http://KEY:SECRET@s3.local:9000/b", [], {}, "cannot reach http://***@s3.local:9000/b"),
    ("see 'https://u:p@h/x' and http://v:q@g", [], {}, "see 'https://***@h/x' and http://***@g"),
    ("got Authorization: Bearer sk-abc123", ["sk-abc123"], {}, "got Authorization: Bearer ***"),
    ("token p%2Fw and p/w", ["p/w!"], {}, "token p%2Fw and p/w"),  # not the secret: left alone
    ("token p%2Fwxx and p/wxx", ["p/wxx"], {}, "token *** and ***"),  # both forms of the secret
    ("key AKIAXYZ1 secret wJalrXUt", [], {"AWS_ACCESS_KEY_ID": "AKIAXYZ1", "AWS_SECRET_ACCESS_KEY": "wJalrXUt"},
     "key *** secret ***"),
    ("abcdef abc", ["abc", "abcdef"], {}, "*** abc"),  # longest first; too short to search for
    ("nothing to hide", ["elsewhere"], {}, "nothing to hide"),
]


@pytest.mark.parametrize(("value", "secrets", "env", "shown"), TEXTS, ids=[t[0] for t in TEXTS])
def test_text_masks_userinfo_and_known_secrets(monkeypatch: pytest.MonkeyPatch, value: str, secrets: list[str],
                                               env: dict[str, str], shown: str) -> None:
    for name, secret in env.items():
        monkeypatch.setenv(name, secret)
    for secret in secrets:
        redact.remember(secret)
    assert redact.text(value) == shown


TYPOS = ["alice:PW@h:30000", "http:/alice:PW@h:30000", "http//alice:PW@h:30000", "http://alice:P/W@h:30000",
         "http://alice:12/PW@h:30000", "http://alice:P#W@h:30000", "http://alice:P?W@h:30000",
         "ftp://alice:PW@h", "http://alice:PW@h:99999"]


@pytest.mark.parametrize("typo", TYPOS)
def test_endpoint_typos_never_show_the_password(typo: str) -> None:
    with pytest.raises(ValueError) as raised:
        ServerURL.parse(typo.replace("PW", PW).replace("P/W", PW[:3] + "/" + PW[3:])
                        .replace("P#W", PW[:3] + "#" + PW[3:]).replace("P?W", PW[:3] + "?" + PW[3:]))
    message = str(raised.value)
    assert PW[3:] not in message and PW[:3] not in message, message


@pytest.mark.parametrize("typo", TYPOS[:4] + TYPOS[5:7])
def test_cli_endpoint_typos_never_show_the_password(tmp_path: Path, typo: str) -> None:
    secret = typo.replace("PW", PW).replace("P/W", "Hun/ter2pw").replace("P#W", "Hun#ter2pw") \
        .replace("P?W", "Hun?ter2pw")
    prompts = make_prompts(tmp_path / "p.jsonl", 2)
    result = run_client(["--endpoints", secret, "--prompts", str(prompts), "--out", str(tmp_path / "out")])
    assert result.code == 2, result.stderr
    assert "error: --endpoints:" in result.stderr
    assert "ter2pw" not in result.stderr + result.stdout and "Hun" not in result.stderr + result.stdout


def test_echoed_token_is_masked_in_the_error_and_its_counters() -> None:
    ServerURL.parse(f"http://alice:{PW}@h:1")
    error = error_for_status(500, f'{{"message": "failed for Authorization: Bearer {PW}"}}'.encode())
    assert isinstance(error, ServerError) and PW not in str(error) and "Bearer ***" in str(error)
    rejected = error_for_status(401, f"bad key Bearer {PW}".encode())
    assert PW not in str(rejected) and PW not in getattr(rejected, "detail", "")
    stats = RunStats(gpus=None)
    stats.track(1)
    stats.record_error(0, error.kind, str(error))
    assert PW not in stats.endpoints[0].last_error
    assert PW not in failure_record("p1", error, 3, "http://h:1")["last_error"]


def test_s3_messages_mask_the_endpoint_userinfo() -> None:
    store = S3Store(S3Url.parse("s3://bucket/prefix"), endpoint_url="http://KEYID:SECRETKEY@127.0.0.1:1")
    error = store._map(OSError("cannot connect to http://KEYID:SECRETKEY@127.0.0.1:1/bucket"), "list")
    assert "SECRETKEY" not in str(error) and "KEYID" not in str(error), error
    assert "cannot reach S3" in str(error)


def test_server_echoing_the_bearer_token_leaves_no_trace(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("echo_auth")
    prompts = make_prompts(tmp_path / "p.jsonl", 2)
    out = tmp_path / "out"
    url = server.url.replace("://", f"://alice:{PW}@", 1)
    result = run_client(["--endpoints", url, "--prompts", str(prompts), "--out", str(out), "--max-attempts", "1"])
    echoed = [r for r in server.log_records() if r.get("method") == "POST"]
    assert echoed, "the server was asked"
    failures = read_failures(out)
    assert len(failures) == 2, result.stderr
    assert all("Authorization: Bearer ***" in f["last_error"] for f in failures), failures
    assert PW not in repr(failures)
    assert PW not in result.stderr + result.stdout



REPLIES = [
    # remembered secret, generated text, as stored
    ("sk-live-12345678", "the key is sk-live-12345678.", "the key is ***."),
    ("sk-live-12345678", "clone ssh://git@host/repo", "clone ssh://git@host/repo"),  # userinfo in a reply is data
    ("EMPTY", "The list is EMPTY.", "The list is EMPTY."),  # a placeholder key is an ordinary word
    ("token-abc123", "echo token-abc123 and token-abc123", "echo *** and ***"),
]


@pytest.mark.parametrize(("secret", "generated", "stored"), REPLIES, ids=[r[1] for r in REPLIES])
def test_a_reply_has_its_known_secrets_masked_and_nothing_else(secret: str, generated: str, stored: str) -> None:
    redact.remember(secret)
    assert redact.reply(generated) == stored
