"""The estimate knows the purpose: tokens past the trainer's window, tokens in loops, and the GPU-hours that
`--train-window` and the loop stop would save. The per-record arithmetic and the paired bootstrap
table-driven; --from-results on a synthetic run whose figures are known; a calibration on a simulated fleet
with loops and a heavy thinking tail, checked against what its records say."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.estimate.measure import Measurements
from client.estimate.model import EXACT_BOOTSTRAP_LIMIT, Interval, Throughput, bootstrap_columns, bootstrap_totals
from client.estimate.purpose import purpose, purposes
from client.estimate.waste import kept_in_window, loop_saving, loop_stop_point, past_window, record_text
from client.loops.repetition import TEXT_RULE, Kind, find_repetition
from simulator.fleet import SimServerSpec
from tests.conftest import REPO
from tests.results_fixture import result, write_segment
from tests.test_estimate import estimate

WORDS = ("the", "value", "we", "need", "check", "whether", "this", "is", "correct", "so", "let", "me", "think")


def varied(chars: int, seed: int = 0) -> str:
    """Sentences that never repeat as a block, ending in '.' (so a loop after them starts exactly there)."""
    rng = random.Random(seed)
    out = ""
    while len(out) < chars:
        out += " ".join(rng.choices(WORDS, k=rng.randint(4, 12))) + f" {rng.choice(WORDS)}{len(out) % 7}x. "
    return out[:chars - 1] + "."


def block(chars: int, seed: int = 1) -> str:
    return ("\n\nWait, " + varied(chars, seed))[:chars]


@pytest.mark.parametrize(("completion", "prompt", "window", "past"), [
    (100, 20, 4096, 0),  # all inside
    (4000, 96, 4096, 0),  # exactly fills it
    (4000, 100, 4096, 4),  # the last four tokens are cut
    (8192, 1000, 4096, 5096),
    (300, 5000, 4096, 300),  # the prompt alone fills the window: nothing of the reply is kept
    (300, 4096, 4096, 300),
    (0, 5000, 4096, 0),
])
def test_tokens_past_the_window(completion: int, prompt: int, window: int, past: int) -> None:
    assert past_window(completion, prompt, window) == past
    assert past == min(completion, max(0, prompt + completion - window))
    assert kept_in_window(completion, prompt, window) == completion - past


@pytest.mark.parametrize(("kind", "length", "block_chars", "span", "stop"), [
    ("exact", 20000, 100, 15000, 5000 + 8192 + 512),  # a short block of prose: the span floor decides
    ("exact", 20000, 1500, 15000, 5000 + 8 * 1500 + 512),  # a long one: its eight repeats decide
    ("exact", 11000, 256, 8400, 11000),  # found, but a stream would have reached the end first
    ("counter", 20000, 100, 18000, 2000 + 16384 + 512),  # prose whose counters move: a higher floor
    ("structured", 40000, 3, 38000, 2000 + 32768 + 512),  # code or data: the whole window
])
def test_where_a_loop_stop_fires(kind: Kind, length: int, block_chars: int, span: int, stop: float) -> None:
    assert loop_stop_point(length, block_chars, span, TEXT_RULE, kind) == stop


@pytest.mark.parametrize(("text", "completion", "finish", "expected"), [
    ("A normal answer.", 10, "stop", (False, 0)),
    (varied(9000), 2250, "length", (False, 0)),  # long and varied: no loop
    # The stream stop is armed at 90% of the budget (a reply that ran to its cap: its length): the last tenth.
    (varied(3000) + block(100) * 150, 4500, "length", (True, round(4500 * (18000 - 16200) / 18000))),
    (varied(3000) + block(1500) * 12, 5250, "length", (True, round(5250 * (21000 - 18900) / 21000))),
    (varied(3000) + block(100) * 80, 1000, "length", (False, 0)),  # 8,000 characters: under the span floor
    (varied(3000) + block(256) * 34, 2926, "length", (True, 0)),  # a stream would not have stopped it sooner
    (varied(3000) + block(100) * 30, 1500, "repetition", (True, 0)),  # a loop stop already ended it
    ("Short.", 3, "repetition", (True, 0)),
    ("", 0, "length", (False, 0)),
], ids=["normal", "varied", "block-100", "block-500", "too-short", "found-at-the-end", "stopped",
        "stopped-no-tail", "empty"])
def test_what_a_loop_stop_saves(text: str, completion: int, finish: str, expected: tuple[bool, int]) -> None:
    assert loop_saving(text, completion, finish) == expected


def test_the_text_is_reasoning_then_content() -> None:
    assert record_text({"reasoning": "ab", "content": "cd"}) == "abcd"
    assert record_text({"reasoning": None, "content": "cd"}) == "cd"
    assert record_text({}) == ""


@pytest.mark.parametrize("size", [3, 40, EXACT_BOOTSTRAP_LIMIT + 1], ids=["tiny", "small", "normal-approx"])
def test_bootstrap_columns_is_the_totals_bootstrap_with_columns_paired(size: int) -> None:
    rng = random.Random(size)
    lengths = [rng.randint(1, 1000) for _ in range(size)]
    strata = [(1000, lengths), (50, [3, 9])]
    first, double = bootstrap_columns([(n, [xs, [2 * x for x in xs]]) for n, xs in strata], rounds=50, seed=4)
    # The first column is exactly what the output tokens' interval comes from ...
    assert first == pytest.approx(bootstrap_totals(strata, rounds=50, seed=4))
    # ... and every column is resampled at the same records.
    assert [d / f for d, f in zip(double, first, strict=True)] == pytest.approx([2.0] * 50)


@pytest.mark.parametrize(("strata", "message"), [
    ([(3, [[1.0, 2.0], [1.0]])], "one value per record"),
    ([(3, [[1.0]]), (3, [[1.0], [2.0]])], "same number of columns"),
    ([(3, [])], "same number of columns"),
])
def test_bootstrap_columns_refuses_ragged_columns(strata: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bootstrap_columns(strata, rounds=2, seed=0)


LOOP_TEXT = varied(3000) + block(100) * 150  # 18,000 characters, a loop stop fires at 11,704


def purpose_run(out: Path) -> dict[str, int]:
    """A saturated run of three strata: 'chat' (prompt 20, reply 100: inside a window of 200), 'code'
    (prompt 150, reply 300: 250 past it) and 'long' (prompt 250: would not be sent). Half of 'chat' and
    of 'code' loop (LOOP_TEXT). Returns the record count of each stratum and of its loops."""
    shapes = {"chat": (20, 100), "code": (150, 300), "long": (250, 300)}
    names = list(shapes)
    counts = dict.fromkeys([*names, "chat_loops", "code_loops"], 0)
    records = []
    slots, duration = 8, 2.0
    for index in range(8 * 45):
        name = names[index % 3]
        prompt, completion = shapes[name]
        loops = name != "long" and index % 6 < 3
        counts[name] += 1
        counts[f"{name}_loops"] = counts.get(f"{name}_loops", 0) + loops
        start = 1000.0 + (index // slots) * duration + (index % slots) * duration / slots
        records.append(result(f"{name}-{index}", reasoning=LOOP_TEXT if loops else "Fine.", content="",
                              completion_tokens=completion, finish_reason="length" if loops else "stop",
                              usage={"prompt_tokens": prompt, "completion_tokens": completion},
                              created=start + duration, total_s=duration + 0.05, ttft_s=0.05,
                              meta={"source": name}))
    write_segment(out, records)
    return counts


def prompts_for(path: Path, ids: list[str]) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"id": i, "messages": [{"role": "user", "content": "q"}],
                                            "meta": {"source": i.split("-")[0]}}) + b"\n" for i in ids))
    return path


def test_from_results_reports_the_window_the_loops_and_the_savings(tmp_path: Path) -> None:
    n = purpose_run(tmp_path / "run")
    ids = [f"{('chat', 'code', 'long')[i % 3]}-{i}" for i in range(8 * 45)]
    prompts = prompts_for(tmp_path / "p.jsonl", ids)
    code, data, stderr = estimate("--from-results", str(tmp_path / "run"), "--prompts", str(prompts),
                                  "--gpus", "4", "--train-window", "200")
    assert code == 0, stderr
    assert data["input"]["plan"]["train_window"] == 200
    assert data["input"]["loop_stop"]["mean_delay_chars"] == TEXT_RULE.check_every / 2
    (whole,) = data["projection"]["purpose"]  # nothing remains, so there is no second target
    total = n["chat"] * 100 + (n["code"] + n["long"]) * 300
    # The stream stop is armed at 90% of a looping reply's budget (its length): it saves the last tenth.
    loop_saved = round(100 * 1800 / 18000), round(300 * 1800 / 18000)
    window = n["code"] * 250 + n["long"] * 300
    loop = n["chat_loops"] * loop_saved[0] + n["code_loops"] * loop_saved[1]
    # With both: a looping chat reply is cut by the loop stop; a looping code reply by the window anyway.
    both = window + n["chat_loops"] * loop_saved[0]
    assert whole["window"] == 200 and whole["prompts"] == 8 * 45
    assert whole["past_window"]["point"] == pytest.approx(window / total)
    assert whole["prompts_over_window"] == pytest.approx(n["long"])
    assert whole["looping_replies"] == pytest.approx((n["chat_loops"] + n["code_loops"]) / (8 * 45))
    assert whole["loop_tokens"]["point"] == pytest.approx((n["chat_loops"] * 100 + n["code_loops"] * 300) / total)
    assert whole["stopped_replies"] == 0
    savings = {row["option"]: row for row in whole["savings"]}
    assert list(savings) == ["train window", "loop stop", "both"]
    rate = data["projection"]["throughput"]["tokens_per_s"]
    for option, tokens in (("train window", window), ("loop stop", loop), ("both", both)):
        row = savings[option]
        assert row["output_tokens"]["point"] == pytest.approx(tokens), option
        assert row["share"]["point"] == pytest.approx(tokens / total), option
        assert row["wall_s"]["point"] == pytest.approx(tokens / rate + row["tail_s"]), option
        assert row["gpu_hours"]["point"] == pytest.approx(4 * row["wall_s"]["point"] / 3600), option
        for figure in ("output_tokens", "share", "wall_s", "gpu_hours"):
            assert row[figure]["low"] <= row[figure]["point"] <= row[figure]["high"], (option, figure)
    # Without --train-window only the loop stop is reported, with the same figures.
    code, data, stderr = estimate("--from-results", str(tmp_path / "run"), "--prompts", str(prompts), "--gpus", "4")
    assert code == 0, stderr
    (alone,) = data["projection"]["purpose"]
    assert alone["window"] is None and alone["past_window"] is None
    assert [row["option"] for row in alone["savings"]] == ["loop stop"]
    assert alone["savings"][0] == savings["loop stop"]


def test_the_rich_report_shows_the_purpose(tmp_path: Path) -> None:
    purpose_run(tmp_path / "run")
    ids = [f"{('chat', 'code', 'long')[i % 3]}-{i}" for i in range(8 * 45)]
    prompts = prompts_for(tmp_path / "p.jsonl", ids)
    proc = subprocess.run([sys.executable, "-m", "client.estimate", "--from-results", str(tmp_path / "run"),
                           "--prompts", str(prompts), "--gpus", "4", "--train-window", "200"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "training window 200 tokens, prompt included" in proc.stdout
    assert "120 prompt(s) (33.3%) fill it alone" in proc.stdout
    assert "What stopping them would save" in proc.stdout
    for option in ("--train-window 200", "loop stop", "both"):
        assert option in proc.stdout


@pytest.mark.slow
def test_calibration_with_loops_and_a_heavy_tail(tmp_path: Path, fleet_factory: Any) -> None:
    # About a third of the replies loop; half of the thinking draws from a heavy tail, some of it to max_tokens.
    # max_tokens 2,400: a simulated loop then runs over the 8,192 characters the text rule needs of prose.
    sim_args = ("--mean-tokens", "80", "--tokens-per-chunk", "8", "--loop-rate", "0.3",
                "--think-tail-rate", "0.5", "--think-tail-alpha", "0.7", "--tokenizer", "none")
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0, extra_args=sim_args)] * 2)
    # Prompts of three sizes, one stratum: the simulator (--tokenizer none) counts a prompt's JSON characters / 4
    # as its tokens, and a word piece of a reply as one.
    sizes = (10, 600, 1400)
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": f"chat-{i}", "messages": [
        {"role": "user", "content": f"question {i} " + "x" * sizes[i % 3]}]}) + b"\n" for i in range(300)))
    out = tmp_path / "calibration"
    window = 300
    code, data, stderr = estimate("--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--sample", "40%",
                                  "--out", str(out), "--max-tokens", "2400", "--train-window", str(window),
                                  "--gpus", "2")
    assert code == 0, stderr
    records = [orjson.loads(line) for path in sorted((out / "segments").glob("*.jsonl"))
               for line in path.read_bytes().splitlines()]
    assert len(records) == data["input"]["done"] == 120
    lengths = [r["usage"]["completion_tokens"] for r in records]
    prompt_tokens = [r["usage"]["prompt_tokens"] for r in records]
    loops = [find_repetition(record_text(r)) is not None for r in records]
    total = sum(lengths)
    (whole,) = data["projection"]["purpose"]
    # One stratum: the projected shares are the sample's own.
    past = sum(past_window(x, p, window) for x, p in zip(lengths, prompt_tokens, strict=True))
    assert whole["past_window"]["point"] == pytest.approx(past / total)
    over = sum(p >= window for p in prompt_tokens)
    assert 0 < over < len(records)
    assert whole["prompts_over_window"] == pytest.approx(300 * over / len(records))
    assert 0 < sum(loops) < len(records)
    assert whole["looping_replies"] == pytest.approx(sum(loops) / len(records))
    assert whole["loop_tokens"]["point"] == pytest.approx(
        sum(x for x, looped in zip(lengths, loops, strict=True) if looped) / total)
    # The simulated loops run to max_tokens; the heavy tail's long replies are cut there too, and are no loops.
    assert all(r["finish_reason"] == "length" for r, looped in zip(records, loops, strict=True) if looped)
    assert any(r["finish_reason"] == "length" and not looped for r, looped in zip(records, loops, strict=True))
    savings = {row["option"]: row for row in whole["savings"]}
    saved_by_loop_stop = sum(loop_saving(record_text(r), r["usage"]["completion_tokens"], r["finish_reason"])[1]
                             for r in records)
    assert savings["loop stop"]["share"]["point"] == pytest.approx(saved_by_loop_stop / total)
    assert 0 < saved_by_loop_stop < sum(x for x, looped in zip(lengths, loops, strict=True) if looped)
    assert savings["train window"]["share"]["point"] == pytest.approx(past / total)
    assert savings["both"]["output_tokens"]["point"] >= max(savings["train window"]["output_tokens"]["point"],
                                                            savings["loop stop"]["output_tokens"]["point"])
    for row in savings.values():
        assert row["gpu_hours"]["low"] <= row["gpu_hours"]["point"] <= row["gpu_hours"]["high"]
        assert row["gpu_hours"]["point"] == pytest.approx(2 * row["wall_s"]["point"] / 3600)
    # The same records read back with --from-results give the same figures.
    again, second, stderr = estimate("--from-results", str(out), "--prompts", str(prompts), "--gpus", "2",
                                     "--train-window", str(window))
    assert again == 0, stderr
    assert second["projection"]["purpose"][0]["past_window"] == whole["past_window"]
    assert second["projection"]["purpose"][0]["loop_tokens"] == whole["loop_tokens"]


def test_purpose_of_a_target_with_an_unsampled_stratum_and_a_stopped_loop() -> None:
    found = Measurements()
    for i in range(4):
        found.add(result(f"a-{i}", reasoning="Fine.", finish_reason="repetition" if i == 0 else "stop",
                         usage={"prompt_tokens": 10, "completion_tokens": 100}), "a")
    # One slot: no tail, so the wall time saved is the saved tokens over the throughput alone.
    rate = Throughput(tokens_per_s=100.0, concurrency=1.0, peak_concurrency=1.0, window_s=10.0, span_s=10.0,
                      typical_s=1.0, blocks=((1000.0, 10.0),))
    got = purpose("whole set", {"a": 4, "b": 6}, found, rate, slots=1, gpus=3, window=50, rounds=50, seed=0)
    assert got.prompts == 10  # 'b' was not sampled: it is projected with the pooled records
    assert got.past_window == Interval(0.6, pytest.approx(0.6), pytest.approx(0.6))
    assert got.prompts_over_window == 0
    assert (got.looping_replies, got.stopped_replies) == (0.25, 0.25)  # stopped by a loop stop: it loops
    assert got.loop_tokens.point == pytest.approx(0.25) and got.loop_tokens.low < got.loop_tokens.high
    savings = {saving.option: saving for saving in got.savings}
    assert savings["loop stop"].output_tokens.point == 0  # it was already stopped
    window = savings["train window"]
    assert window.output_tokens.point == pytest.approx(600) and window.tail_s == 0
    assert window.wall_s.point == pytest.approx(6.0) and window.gpu_hours.point == pytest.approx(3 * 6.0 / 3600)
    assert savings["both"].output_tokens.point == pytest.approx(600)
    # A target with no prompt left has no figures; without a window only the loop stop is projected.
    (alone,) = purposes([("whole set", {"a": 4}), ("remaining", {"a": 0})], found, rate, 1, 3, None, 10, 0)
    assert alone.window is None and alone.past_window is None and [s.option for s in alone.savings] == ["loop stop"]
