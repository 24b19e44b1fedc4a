"""A segment line damaged after its segment closed (one flipped byte, or a line deleted by hand) while its
`.ids` sidecar still lists the id: the next start checks each sidecar against its segment's whole records,
moves the damaged line aside (named with its file and line), and generates those prompts again, locally
and before an upload to S3, so a fresh start from S3 alone has every prompt whole exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from tests.conftest import REPO, make_prompts, read_results, run_client
from tests.s3_server import BUCKET, S3Server, read_s3_results

COUNT = 12


def _args(prompts: Path, out: Path, *extra: str) -> list[str]:
    return ["--simulate", "1", "--sim-speed", "200", "--prompts", str(prompts), "--out", str(out),
            "--max-tokens", "16", *extra]


def _damage(out: Path) -> tuple[Path, str, str]:
    """Flip one byte of line 5 (its closing brace) and delete line 9; returns the segment and both ids."""
    (segment,) = (out / "segments").glob("*.jsonl")
    lines = segment.read_bytes().splitlines(keepends=True)
    flipped_id, deleted_id = orjson.loads(lines[4])["id"], orjson.loads(lines[8])["id"]
    brace = lines[4].rindex(b"}")
    lines[4] = lines[4][:brace] + bytes([lines[4][brace] ^ 0x01]) + lines[4][brace + 1:]
    del lines[8]
    segment.write_bytes(b"".join(lines))
    return segment, flipped_id, deleted_id


def _audit(out: Path, prompts: Path) -> int:
    return subprocess.run([sys.executable, "-m", "client.audit", str(out), "--prompts", str(prompts), "--json"],
                          cwd=REPO, capture_output=True, timeout=120, check=False).returncode


def test_a_damaged_or_deleted_line_is_generated_again_and_the_damage_set_aside(tmp_path: Path) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", COUNT)
    out = tmp_path / "out"
    assert run_client(_args(prompts, out)).code == 0
    segment, flipped_id, deleted_id = _damage(out)
    again = run_client(_args(prompts, out))
    assert again.code == 0, again.stderr
    assert f"{segment}:5: not a whole record; moved aside to {segment.stem}.damaged" in again.stderr
    assert f"{segment.with_suffix('.ids')}: 2 id(s) without a whole record in {segment.name}" in again.stderr
    assert "resuming: 10 done id(s) in 1 segment(s), 1 damaged line(s) moved aside" in again.stderr
    ids = [r["id"] for r in read_results(out)]  # fails on any line that is not whole JSON
    assert len(set(ids)) == len(ids) == COUNT
    assert {flipped_id, deleted_id} <= set(ids)
    aside = segment.with_suffix(".damaged").read_bytes()
    assert aside.count(b"\n") == 1 and flipped_id.encode() in aside, "the damaged line is kept, apart"
    assert _audit(out, prompts) == 0
    third = run_client(_args(prompts, out))
    assert third.code == 0 and "warning:" not in third.stderr, third.stderr
    assert len(read_results(out)) == COUNT, "nothing whole is generated twice"


def test_a_damaged_segment_is_checked_before_its_upload_so_s3_alone_holds_every_prompt(
        tmp_path: Path, s3: S3Server, s3_prefix: str) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", COUNT)
    out = tmp_path / "out"
    assert run_client(_args(prompts, out)).code == 0  # not synced yet
    _, flipped_id, deleted_id = _damage(out)
    sync = ["--s3", f"s3://{BUCKET}/{s3_prefix}", "--s3-endpoint-url", s3.url]
    uploaded = run_client(_args(prompts, out, *sync))
    assert uploaded.code == 0, uploaded.stderr
    stored = [r["id"] for r in read_s3_results(s3, BUCKET, s3_prefix)]  # fails on a line that is not JSON
    assert len(stored) == len(set(stored)) == COUNT and {flipped_id, deleted_id} <= set(stored)
    fresh = run_client(_args(prompts, tmp_path / "fresh", *sync))
    assert fresh.code == 0, fresh.stderr
    assert "already-done 12" in fresh.stderr, fresh.stderr
    assert not (tmp_path / "fresh" / "segments").exists() or not read_results(tmp_path / "fresh")


def test_a_segment_damaged_here_after_its_upload_counts_its_whole_copy_in_s3(
        tmp_path: Path, s3: S3Server, s3_prefix: str) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", COUNT)
    out = tmp_path / "out"
    sync = ["--s3", f"s3://{BUCKET}/{s3_prefix}", "--s3-endpoint-url", s3.url]
    assert run_client(_args(prompts, out, *sync)).code == 0  # uploaded whole
    segment, _, _ = _damage(out)
    again = run_client(_args(prompts, out, *sync))
    assert again.code == 0, again.stderr
    assert f"{segment}:5: not a whole record" in again.stderr
    stored = [r["id"] for r in read_s3_results(s3, BUCKET, s3_prefix)]
    assert len(stored) == len(set(stored)) == COUNT, "the whole copy in S3 counts: nothing is stored twice"
