"""A kind of server the client does not ship, both halves of it in this one module: the request side (how it
is recognised, the field that asks for its ids) and the reply side (`ReplyDialect`: its ids arrive as
space-separated text in an object of its own after the finish chunk, its MTP accept length beside them, its
load in metrics of its own names). Registered by the one line a new module would add to KNOWN, and no
client module is edited: a whole `client.run` against a real server of that kind (tests/servers/oddserver,
mode text_ids) stores its ids exactly, and the messages that name the kinds name it too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.core.errors import ConfigError
from client.core.payload import FieldPolicy
from client.core.records import Spec, Usage
from client.fleet import kinds
from client.fleet.kinds import metric_families
from client.fleet.profile import TOKEN_IDS_FIELD, ServerProfile
from client.fleet.token_ids import ids_policy, no_ids_refusal
from client.run.__main__ import main as run_entry
from client.wire.dialect import PLAIN, MetricNames, ReplyDialect, TrailerIds
from client.wire.loads import ServerLoad, parse_metrics
from client.wire.sse import StreamParser
from tests.conftest import make_prompts, read_results

FIELD = "x_text_ids"  # what a request carries to get the ids, and the key of the object they come in


def _text_ids(text: object) -> list[int] | None:
    if not isinstance(text, str):
        return None
    try:
        return [int(part) for part in text.split()]
    except ValueError:
        return None


def read_text_ids(trailer: dict[str, Any]) -> TrailerIds:
    return TrailerIds(prompt=_text_ids(trailer.get("prompt")), completion=_text_ids(trailer.get("completion")))


def text_figures(trailer: dict[str, Any], usage: Usage) -> Spec | None:
    accept = trailer.get("accept")
    return {"accept_length": float(accept)} if isinstance(accept, int | float) else None


TEXTIDS = ServerProfile(
    name="textids", label="TextIds", owned_by=("textids",), extensions=frozenset({TOKEN_IDS_FIELD}),
    id_fields={FIELD: True}, ids_hint="TextIds with x_text_ids",
    reply=ReplyDialect(trailer=FIELD, read_trailer=read_text_ids, figures=text_figures,
                       metrics=MetricNames(running="textids:running", waiting="textids:queued",
                                           generated="textids:generated_tokens")))


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds, "KNOWN", (*kinds.KNOWN, TEXTIDS))  # the one line a new module adds to KNOWN


def _stream(trailer: dict[str, Any]) -> bytes:
    chunks = [b'{"choices": [{"index": 0, "delta": {"content": "Hi."}, "finish_reason": null}]}',
              b'{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}',
              b'{"choices": [], "' + FIELD.encode() + b'": ' + repr(trailer).replace("'", '"').encode() + b"}",
              b'{"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}']
    return b"".join(b"data: " + chunk + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize(("dialect", "prompt", "completion", "spec"), [
    (TEXTIDS.reply, [7, 8], [9, 10, 11], {"accept_length": 2.5}),
    (PLAIN, None, None, None),  # the same stream read as a plain server's: the ids come from the dialect alone
    (kinds.SGLANG.reply, None, None, None),
])
def test_the_third_format_is_read_by_its_dialect(dialect: ReplyDialect, prompt: Any, completion: Any,
                                                  spec: Any) -> None:
    parser = StreamParser(dialect=dialect)
    parser.feed(_stream({"prompt": "7 8", "completion": "9 10 11", "accept": 2.5}))
    done = parser.completion(ended_cleanly=True)
    assert (done.content, done.prompt_token_ids, done.completion_token_ids, done.spec) == \
        ("Hi.", prompt, completion, spec)


def test_a_run_stores_the_made_up_kinds_ids_exactly(registered: None, servers: Any, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    server = servers.oddserver("text_ids", extra=("--owned-by", "textids"))
    out = tmp_path / "out"
    code = run_entry(["--endpoints", server.url, "--prompts", str(make_prompts(tmp_path / "p.jsonl", 6)),
                      "--out", str(out), "--token-ids", "on", "--max-tokens", "64"])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert "servers: textids x1" in err
    assert f"asked for ids ({FIELD})" in err
    records = read_results(out)
    assert len(records) == 6
    for record in records:
        usage = record["usage"]
        assert record["prompt_token_ids"] == list(range(100, 100 + usage["prompt_tokens"]))
        assert record["completion_token_ids"] == list(range(1000, 1000 + usage["completion_tokens"]))
        assert record["spec"] == {"accept_length": 2.5}


def test_the_messages_that_name_the_kinds_name_it(registered: None) -> None:
    with pytest.raises(ConfigError, match=r"http://a is none of SGLang, vLLM and TextIds.*--compat "
                                          r"sglang\|vllm\|textids"):
        ids_policy(FieldPolicy.standard(), "on", {"http://a": "openai"})
    refusal = str(no_ids_refusal("http://a", "textids"))
    assert f"no {FIELD} ids" in refusal and "TextIds with x_text_ids" in refusal


def test_its_load_is_read_from_its_own_metric_names(registered: None) -> None:
    text = b"# TYPE textids:running gauge\ntextids:running 3\ntextids:queued 2\ntextids:generated_tokens 40\n"
    assert parse_metrics(text, metric_families()) == ServerLoad(3, 2, generation_tokens_total=40.0)
