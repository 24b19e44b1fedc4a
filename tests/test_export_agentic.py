"""Agentic `specforge` rows under Qwen3.6's own template: a prompt whose history holds the assistant's
tool-call turns after the last user message. The template renders those turns with the assistant header
SpecForge's `qwen3.5` spans start at (`<|im_start|>assistant\\n<think>\\n`), so SpecForge without
`data.train_only_last_turn` supervises prompt turns the model did not generate in this run; no row can
render the server's text without them (SpecForge finds its spans in the text), and no row column can carry
the setting (`build_eagle3_dataset` hands every column to `preprocess_conversations` as a keyword, beside its
own `train_only_last_turn`: "got multiple values"). So the export writes such rows for the setting and says
the file needs it (`--train-only-last-turn auto`, the default); `off` leaves them out as before.

The records are made as the server makes them: the prompt rendered by the template with its generation
prompt, the reply the text the template renders after it, each tokenized by the tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from client.export import fidelity
from client.export.render import ChatTokenizer
from client.export.rows import Sample, Turn
from client.local.chat_template import template_messages
from simulator.tiny_tokenizer import tiny_tokenizer_dir
from tests.engines.trainer_checks import judge
from tests.results_fixture import WEATHER_TOOL, result, tool_call, write_segment
from tests.test_export import export as export_qwen3

CALL = tool_call("get_weather", '{"city": "Paris"}')


def qwen36() -> Path:
    return tiny_tokenizer_dir(chat_template="qwen3.6")


def served(tok: ChatTokenizer, record_id: str, messages: list[dict[str, Any]],
           reply: dict[str, Any]) -> dict[str, Any]:
    """A record as the server writes it, with its exact ids."""
    # As SGLang hands them to the template: tool-call arguments parsed into objects.
    prompt_text = tok.render(template_messages(messages), [WEATHER_TOOL], add_generation_prompt=True)
    whole = tok.render(template_messages([*messages, reply]), [WEATHER_TOOL], add_generation_prompt=False)
    assert whole.startswith(prompt_text), "the reply renders after the generation prompt"
    completion_text = whole[len(prompt_text):].removesuffix("\n")  # the newline after <|im_end|> is the template's
    prompt, completion = tok.encode(prompt_text), tok.encode(completion_text)
    record = result(record_id, reasoning=reply.get("reasoning_content", ""), content=reply["content"],
                    tool_calls=reply.get("tool_calls"), tools=[WEATHER_TOOL],
                    finish_reason="tool_calls" if reply.get("tool_calls") else "stop")
    record["messages"] = messages
    record["usage"] = {"prompt_tokens": len(prompt), "completion_tokens": len(completion)}
    record["prompt_token_ids"], record["completion_token_ids"] = prompt, completion
    return record


def agentic(tok: ChatTokenizer) -> dict[str, Any]:
    """The second step of a tool loop: the first call and its result are in the prompt, after the user."""
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C."}]
    return served(tok, "agentic", messages, {"role": "assistant", "reasoning_content": "It is sunny.",
                                             "content": "Sunny and 21 C in Paris."})


def first_step(tok: ChatTokenizer) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Weather in Rome?"}]
    return served(tok, "first-step", messages, {"role": "assistant", "reasoning_content": "I should call it.",
                                                "content": "Let me check.", "tool_calls": [CALL]})


def sample(record: dict[str, Any], tok: ChatTokenizer) -> Sample:
    turn = Turn(record, record["prompt_token_ids"], record["completion_token_ids"], record["tools"])
    return Sample(record["id"], (turn,), tok.content_format)


def test_the_check_judges_an_agentic_row_with_and_without_the_setting() -> None:
    tok = ChatTokenizer.load(qwen36())
    row = sample(agentic(tok), tok)
    without = fidelity.check(row, tok, last_turn="off")
    assert not without.matched and without.reason.startswith("the trainer supervises a token of the prompt")
    assert fidelity.check(row, tok, last_turn="on") == fidelity.Verdict(True, [WEATHER_TOOL])
    assert fidelity.check(row, tok, last_turn="auto") == fidelity.Verdict(True, [WEATHER_TOOL], last_turn_only=True)
    # A first step has one assistant span: exact either way, and it needs nothing.
    plain = sample(first_step(tok), tok)
    assert fidelity.check(plain, tok, last_turn="off").matched
    assert fidelity.check(plain, tok, last_turn="auto") == fidelity.Verdict(True, [WEATHER_TOOL])


def export(run: Path, out: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    return export_qwen3(run, out, "--format", "specforge", *extra, "--tokenizer", str(qwen36()))


def test_agentic_rows_are_written_and_the_setting_is_stated(tmp_path: Path) -> None:
    tok = ChatTokenizer.load(qwen36())
    write_segment(tmp_path / "run", [agentic(tok), first_step(tok)])
    out = tmp_path / "rows.jsonl"
    code, report, stderr = export(tmp_path / "run", out)
    assert code == 0, stderr
    assert (report["exported"], report["template"]["matched"], report["template"]["last_turn_only"]) == (2, 2, 1)
    assert report["last_turn_only"] == 1 and report["train_only_last_turn"] is True
    assert f"important: train {out} with SpecForge's data.train_only_last_turn: true: 1 row(s)" in stderr
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(written[0]) <= {"id", "conversations", "tools"}, "no column SpecForge would hand the template"
    # Without the setting the row is trained differently: left out, and the file refused above the share.
    code, report, stderr = export(tmp_path / "run", tmp_path / "off.jsonl", "--train-only-last-turn", "off")
    assert code == 3 and report["template"]["mismatched"] == 1 and not (tmp_path / "off.jsonl").exists()
    assert report["train_only_last_turn"] is False


def test_a_file_without_agentic_rows_needs_no_setting(tmp_path: Path) -> None:
    tok = ChatTokenizer.load(qwen36())
    write_segment(tmp_path / "run", [first_step(tok)])
    code, report, stderr = export(tmp_path / "run", tmp_path / "rows.jsonl")
    assert code == 0, stderr
    assert (report["last_turn_only"], report["train_only_last_turn"]) == (0, False)
    assert "train_only_last_turn" not in stderr.replace("template check", "")
    code, report, stderr = export(tmp_path / "run", tmp_path / "on.jsonl", "--train-only-last-turn")
    assert code == 0 and report["train_only_last_turn"] is True  # asked for: stated as what it is checked for
    assert "is checked as SpecForge trains with data.train_only_last_turn: true" in stderr


@pytest.mark.trainers
@pytest.mark.usefixtures("specforge_venv")
def test_specforge_trains_the_agentic_row_exactly_with_the_stated_setting(tmp_path: Path) -> None:
    """SpecForge's own data code, with the setting the export states: every row exact; without it, the
    agentic row's prompt turn is supervised (why the setting is required)."""
    from tests.engines.trainers import specforge_conversations

    tok = ChatTokenizer.load(qwen36())
    records = [agentic(tok), first_step(tok)]
    write_segment(tmp_path / "run", records)
    out = tmp_path / "rows.jsonl"
    code, report, stderr = export(tmp_path / "run", out)
    assert code == 0 and report["train_only_last_turn"] is True, stderr
    server = {r["id"]: (r["prompt_token_ids"] + r["completion_token_ids"],
                        [0] * len(r["prompt_token_ids"]) + [1] * len(r["completion_token_ids"])) for r in records}
    trained = specforge_conversations(out, qwen36(), 1 << 20, train_only_last_turn=True)
    assert len(trained) == 2 and judge(trained, server, tok) == []
    untrained = specforge_conversations(out, qwen36(), 1 << 20)
    assert judge(untrained, server, tok) == [
        "agentic: the loss mask differs from the server's split of prompt and reply"]
