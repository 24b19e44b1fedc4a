"""The template-fidelity check: a trainer's template that differs from the server's by one token is
caught, with its first differing position and the tokens around it; `--format specforge` refuses it
(exit 3, OUT not written) above `--max-template-mismatch`, leaves the rows out below it, and writes them
with `--allow-template-mismatch`. A reply cut by max_tokens is never in a `specforge` row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.export.fidelity import first_difference
from tests.results_fixture import write_segment
from tests.test_export import cases, export
from tests.tokenizer_fixture import TEMPLATE_PATH, load_tiny

# The serving template writes "\n</think>\n\n" after the reasoning; this trainer's writes "\n</think>\n".
SERVING_CLOSE, TRAINER_CLOSE = "'\\n</think>\\n\\n'", "'\\n</think>\\n'"


@pytest.mark.parametrize(("server", "trainer", "expected"), [
    ([1, 2, 3], [1, 2, 3], -1),
    ([1, 2, 3], [1, 2, 3, 4], -1),  # what the template adds after the last generated token is not compared
    ([1, 2, 3], [1, 9, 3], 1),
    ([1, 2, 3], [1, 2], 2),
    ([], [5], -1),
])
def test_first_difference(server: list[int], trainer: list[int], expected: int) -> None:
    assert first_difference(server, trainer) == expected


def trainer_template(tmp_path: Path) -> Path:
    serving = TEMPLATE_PATH.read_text()
    assert serving.count(SERVING_CLOSE) == 1
    path = tmp_path / "trainer.jinja"
    path.write_text(serving.replace(SERVING_CLOSE, TRAINER_CLOSE))
    return path


def records() -> list[dict[str, Any]]:
    return [r for r in cases() if r["id"] != "no-think"]  # plain, tools, cut


def test_a_template_one_token_off_is_caught_and_refused(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", records())
    out = tmp_path / "train.jsonl"
    code, report, stderr = export(tmp_path / "run", out, "--format", "specforge", "--chat-template",
                                  str(trainer_template(tmp_path)))
    assert code == 3, stderr
    assert not out.exists() and not out.with_name(out.name + ".part").exists()
    template = report["template"]
    assert (template["checked"], template["matched"], template["mismatched"]) == (2, 0, 2)
    assert report["unreproducible"] == 1  # "cut": SpecForge would close it, so it is not in the rows
    plain = records()[0]
    # Independently: the two completions' own tokens agree up to where "\n\n" meets "\n".
    served, trained = (load_tiny().encode(f"The user asks.\n</think>{gap}The answer is two.<|im_end|>",
                                          add_special_tokens=False).ids for gap in ("\n\n", "\n"))
    common = next(i for i, (a, b) in enumerate(zip(served, trained, strict=False)) if a != b)
    expected = len(plain["prompt_token_ids"]) + common
    assert f"plain: first difference at token {expected}: server [" in stderr
    example = next(e for e in template["examples"] if ": plain: " in e)
    server_part, trainer_part = example.split("server ")[1].split(", trainer ")
    assert "'</think>', '\\n', '\\n', 'The'" in server_part and "'</think>', '\\n', 'The'" in trainer_part
    assert "SpecForge would train on 2 of 2 row(s) (100.00%) differently" in stderr
    assert "0 of 2 row(s) with server ids (0.00%) are trained by SpecForge exactly" in stderr


def test_the_threshold_and_the_way_on(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", records())
    template = str(trainer_template(tmp_path))
    code, report, stderr = export(tmp_path / "run", tmp_path / "a.jsonl", "--format", "specforge",
                                  "--chat-template", template, "--max-template-mismatch", "1")
    assert code == 1, stderr  # written, but without the rows the trainer would train on differently
    assert (tmp_path / "a.jsonl").read_text() == "" and report["template"]["mismatched"] == 2
    assert report["template_left_out"] == 2 and "2 row(s) that SpecForge would train on differently" in stderr
    code, report, stderr = export(tmp_path / "run", tmp_path / "b.jsonl", "--format", "specforge",
                                  "--chat-template", template, "--allow-template-mismatch")
    assert code == 0 and len((tmp_path / "b.jsonl").read_text().splitlines()) == 2
    assert "first difference at token" in stderr


def test_the_tokenized_formats_report_and_write(tmp_path: Path) -> None:
    """The tokenized formats carry the server's ids: a template mismatch is reported, not refused."""
    write_segment(tmp_path / "run", records())
    code, report, stderr = export(tmp_path / "run", tmp_path / "t.jsonl", "--format", "specforge-tokenized",
                                  "--template-check", "all",
                                  "--chat-template", str(trainer_template(tmp_path)))
    assert code == 0, stderr
    # The cut reply too: the template would close it with tokens the model never generated.
    assert report["template"]["mismatched"] == 3 and report["written"]
    assert "cut: the trainer supervises tokens past the reply's last one" in stderr
    code, report, stderr = export(tmp_path / "run", tmp_path / "t.jsonl", "--format", "specforge-tokenized",
                                  "--chat-template", str(trainer_template(tmp_path)))
    assert code == 0 and report["template"]["checked"] == 0  # by default only where the trainer re-renders
    assert "template check" not in stderr
    code, report, _ = export(tmp_path / "run", tmp_path / "s.jsonl", "--format", "specforge",
                             "--chat-template", str(trainer_template(tmp_path)), "--template-check", "off")
    assert code == 0 and report["template"]["checked"] == 0


def test_a_reply_made_with_thinking_off_is_trained_on_its_prompt(tmp_path: Path) -> None:
    """Thinking off: the server's prompt ends with the empty think block (`<think>\\n\\n</think>\\n\\n`) and the
    model generated only "Sunny today.". SpecForge's `qwen3.5` template supervises everything after the
    assistant header `<|im_start|>assistant\\n<think>\\n`, so it would train the drafter on the closing of a
    think block the model never wrote. The tokens agree; the loss mask does not, and the check says so."""
    no_think = next(r for r in cases() if r["id"] == "no-think")
    write_segment(tmp_path / "run", [no_think])
    code, report, stderr = export(tmp_path / "run", tmp_path / "n.jsonl", "--format", "specforge")
    assert code == 3
    assert report["template"]["mismatched"] == 1
    assert "no-think: the trainer supervises a token of the prompt" in stderr
    prompt = len(no_think["prompt_token_ids"])
    assert f"first difference at token {prompt - 4}:" in stderr  # "\n", "</think>", "\n", "\n" of the prompt
