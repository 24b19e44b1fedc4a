"""A chat template that fails on one conversation fails that conversation, named, as a RenderError (the
project's error tree), never the run or the export: in the `--tokenizer` prompt count behind
`--train-window`, in the export's re-render and in its template check. With the real templates: Qwen3.6's
`|items` on a tool argument that is not a JSON object, its refusal of a system message after the first,
and Qwen3's `'</think>' in content` on a None content (which the server never hands it: SGLang renders a
null content as "", and so does the count)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.errors import RegenError, RenderError
from client.local.chat_template import ChatTokenizer, prompt_count, template_messages
from tests.conftest import WEATHER_TOOL, read_failures, read_results, run_client
from tests.real_templates import QWEN3, QWEN36, tokenizer_dir
from tests.results_fixture import result, tool_call, write_segment

CALL_TURN: dict[str, Any] = {"role": "assistant", "content": None,
                             "tool_calls": [tool_call("get_weather", '{"city": "Paris"}')]}
TOOL_TURN = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


def _tok(name: str, tmp_path: Path) -> ChatTokenizer:
    return ChatTokenizer.load(tokenizer_dir(name, tmp_path / name))


def _loop(arguments: str, content: Any = None) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": [tool_call("get_weather", arguments)]},
            TOOL_TURN]


def test_render_error_is_in_the_error_tree() -> None:
    assert issubclass(RenderError, RegenError)


@pytest.mark.parametrize(("name", "messages", "says"), [
    (QWEN36, _loop("not json {"), "TypeError"),  # `tool_call.arguments|items` on a string
    (QWEN36, _loop('["a", "list"]'), "TypeError"),
    (QWEN36, [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}],
     "System message must be at the beginning"),
])
def test_a_template_failure_is_a_render_error(tmp_path: Path, name: str, messages: list[dict[str, Any]],
                                              says: str) -> None:
    tok = _tok(name, tmp_path)
    with pytest.raises(RenderError, match=says):
        prompt_count(tok, messages, [WEATHER_TOOL], kwargs={"enable_thinking": True})


def test_a_none_content_renders_as_the_server_renders_it(tmp_path: Path) -> None:
    """Qwen3's template fails on a None content as such (a RenderError, not a TypeError); the count hands it
    "" as SGLang does, so the prompt is counted as the server renders it."""
    tok = _tok(QWEN3, tmp_path)
    raw = [{"role": "user", "content": "Weather in Paris?"}, CALL_TURN, TOOL_TURN]
    with pytest.raises(RenderError, match="TypeError"):
        tok.render(raw, [WEATHER_TOOL], add_generation_prompt=True)
    served = [*raw[:1], {**CALL_TURN, "content": ""}, TOOL_TURN]
    text = tok.render(template_messages(served), [WEATHER_TOOL], add_generation_prompt=True)
    assert prompt_count(tok, raw, [WEATHER_TOOL]) == len(tok.encode(text))


def _prompts(path: Path) -> Path:
    good = [{"id": f"ok{i}", "messages": [{"role": "user", "content": f"Question {i}: the weather?"}]}
            for i in range(4)]
    bad = [
        # A null content in a tool loop: counted as SGLang renders it, so the prompt completes.
        {"id": "none-content", "messages": [{"role": "user", "content": "Weather in Paris?"}, CALL_TURN, TOOL_TURN],
         "tools": [WEATHER_TOOL]},
        # Qwen3.6's template raises on a system message after the first: this prompt fails, named.
        {"id": "late-system", "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]},
        # Tool arguments that are not JSON: the prompt file's own check refuses the line, named.
        {"id": "not-json", "messages": _loop("not json {"), "tools": [WEATHER_TOOL]},
    ]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*good[:2], *bad, *good[2:]]))
    return path


def test_a_train_window_run_fails_the_prompts_its_template_cannot_render(tmp_path: Path, servers: Any) -> None:
    """--train-window counted on this host with the real Qwen3.6 template (--tokenizer DIR, a server without a
    tokenize route): the prompts it cannot render fail alone, each named with the template's reason; the
    others complete with the window's cap."""
    server = servers.oddserver("normal", extra=("--owned-by", "acme"))
    out = tmp_path / "out"
    model = tokenizer_dir(QWEN36, tmp_path / "qwen36")
    done = run_client(["--endpoints", server.url, "--prompts", str(_prompts(tmp_path / "p.jsonl")), "--out",
                       str(out), "--max-tokens", "600", "--train-window", "2000", "--tokenizer", str(model)])
    assert done.code == 1, done.stderr[-3000:]  # some prompts failed; the run went to its end
    assert sorted(r["id"] for r in read_results(out)) == ["none-content", "ok0", "ok1", "ok2", "ok3"]
    failures = {f["id"]: f for f in read_failures(out)}
    assert list(failures) == ["late-system"]
    assert "System message must be at the beginning" in failures["late-system"]["last_error"]
    assert "p.jsonl:5" in done.stderr and "not valid JSON" in done.stderr, done.stderr[-3000:]
    tok = ChatTokenizer.load(model)
    for record in read_results(out):
        counted = prompt_count(tok, record["messages"], record.get("tools"), kwargs={"enable_thinking": True})
        assert record["train_window"]["prompt_tokens"] == counted


def _export(run: Path, out: Path, model: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    import subprocess
    import sys

    from tests.conftest import REPO

    proc = subprocess.run([sys.executable, "-m", "client.export", str(run), "--tokenizer", str(model), "--out",
                           str(out), "--json", *extra], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def test_the_export_fails_the_records_its_template_cannot_render(tmp_path: Path) -> None:
    """Re-rendered records whose history the template cannot render are `render failed`, named; the rest
    are exported (exit 1, OUT written)."""
    model = tokenizer_dir(QWEN36, tmp_path / "qwen36")
    tok = ChatTokenizer.load(model)
    records = []
    for record_id, messages in (("ok", [{"role": "user", "content": "Weather?"}]),
                                ("not-json", _loop("not json {")),
                                ("late-system", [{"role": "user", "content": "hi"},
                                                 {"role": "system", "content": "late"}])):
        record = result(record_id, tools=[WEATHER_TOOL], content="Sunny.", reasoning="Look it up.")
        record["messages"] = messages
        if record_id == "ok":  # counts that agree with the template, so that the row is kept
            prompt = tok.render(messages, [WEATHER_TOOL], add_generation_prompt=True)
            turn = {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."}
            full = tok.render([*messages, turn], [WEATHER_TOOL], add_generation_prompt=False)
            completion = full[len(prompt):full.rindex("<|im_end|>") + len("<|im_end|>")]
            record["usage"] = {"prompt_tokens": len(tok.encode(prompt)),
                               "completion_tokens": len(tok.encode(completion))}
        records.append(record)
    write_segment(tmp_path / "run", records)
    code, report, stderr = _export(tmp_path / "run", tmp_path / "train.jsonl", model, "--format",
                                   "specforge-tokenized")
    assert code == 1, stderr
    assert report["exported"] == 1 and report["failed"] == 2, report
    assert report["problems"] == {"render failed": 2}
    assert any("not-json" in e and "TypeError" in e for e in report["examples"]), report["examples"]
    assert any("late-system" in e and "System message" in e for e in report["examples"]), report["examples"]
