"""Prompt file formats: gzip, zstd, a directory, a BOM, a JSON array, an empty set and a set with no valid
record, read by the reader itself and through the real `python -m client.run` CLI on a simulated fleet;
and SIGTERM during the start-up wait (--wait-ready) ends in exit 130 with a message."""

from __future__ import annotations

import gzip
import os
import random
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
import zstandard

from client.core.errors import ConfigError, InputError
from client.local.prompt_files import prompt_lines, resolve_prompt_files
from client.local.source import PromptSource, count_remaining
from simulator.fleet import SimFleet, SimServerSpec
from tests.conftest import REPO, client_command, count_written, run_client


def records(count: int, prefix: str = "p") -> bytes:
    return b"".join(orjson.dumps({"id": f"{prefix}{i}", "messages": [{"role": "user", "content": f"q {i}"}]}) + b"\n"
                    for i in range(count))


def write(path: Path, data: bytes) -> Path:
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def json_array(count: int) -> bytes:
    return b"[\n" + b",\n".join(records(count).splitlines()) + b"\n]\n"


# -- the reader itself --------------------------------------------------------------------------------

READ_CASES = [
    ("plain", "p.jsonl", records(3)),
    ("gzip", "p.jsonl.gz", records(3)),
    ("zstd", "p.jsonl.zst", records(3)),
    ("BOM", "p.jsonl", b"\xef\xbb\xbf" + records(3)),
    ("gzip with a BOM", "p.jsonl.gz", b"\xef\xbb\xbf" + records(3)),
    ("no final newline", "p.jsonl", records(3).rstrip(b"\n")),
]


@pytest.mark.parametrize(("name", "filename", "data"), READ_CASES, ids=[c[0] for c in READ_CASES])
def test_every_format_reads_the_same_records(tmp_path: Path, name: str, filename: str, data: bytes) -> None:
    path = write(tmp_path / filename, data)
    source = PromptSource([path], set())
    assert [p.id for p in source] == ["p0", "p1", "p2"]
    assert source.counts.invalid == 0 and source.counts.problems == []
    assert count_remaining([path], {"p1"}) == 2


def test_a_directory_is_its_prompt_files_in_sorted_order(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    write(folder / "b.jsonl.zst", records(2, "b"))
    write(folder / "a.jsonl.gz", records(2, "a"))
    write(folder / "c.jsonl", records(1, "c"))
    (folder / "notes.txt").write_text("not a prompt file")
    (folder / "old.json").write_bytes(json_array(2))
    lines: list[str] = []
    files = resolve_prompt_files([folder], note=lines.append)
    assert [p.name for p in files.paths] == ["a.jsonl.gz", "b.jsonl.zst", "c.jsonl"]
    assert lines == [f"--prompts {folder}: reading 3 prompt file(s) in sorted order"]
    assert [p.id for p in PromptSource(files.paths, set())] == ["a0", "a1", "b0", "b1", "c0"]


REFUSED_CASES = [
    ("JSON array", "set.json", json_array(3), "holds one JSON array"),
    ("JSON array after blank lines and a BOM", "set.jsonl", b"\xef\xbb\xbf\n  \n" + json_array(3),
     "holds one JSON array"),
    ("gzip JSON array", "set.json.gz", json_array(3), "gzip -dc"),
    ("corrupt gzip", "set.jsonl.gz", b"\x1f\x8b\x08\x00garbage", "the gzip stream is corrupt"),
    ("corrupt zstd", "set.jsonl.zst", b"(\xb5/\xfd garbage", "the zstd stream is corrupt"),
]


@pytest.mark.parametrize(("name", "filename", "data", "message"), REFUSED_CASES, ids=[c[0] for c in REFUSED_CASES])
def test_a_file_that_is_not_jsonl_is_refused_at_once(tmp_path: Path, name: str, filename: str, data: bytes,
                                                     message: str) -> None:
    path = tmp_path / filename
    if "corrupt" in name:
        path.write_bytes(data)
    else:
        write(path, data)
    with pytest.raises(ConfigError, match=message) as caught:
        resolve_prompt_files([path])
    assert str(path) in str(caught.value)


def test_a_stream_cut_short_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(records(2000))[:-200])
    expected = rf"{path.name}:\d+: cannot read: the gzip stream is corrupt or cut short"
    with pytest.raises(InputError, match=expected), prompt_lines(path) as lines:
        for _ in lines:
            pass


def varied_records(count: int) -> bytes:
    """Records that do not compress to one block, so a file cut in half still holds whole blocks."""
    rnd = random.Random(0)
    return b"".join(orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": rnd.randbytes(40).hex()}]})
                    + b"\n" for i in range(count))


CUT_CASES = [("gzip", "cut.jsonl.gz", gzip.compress), ("zstd", "cut.jsonl.zst", zstandard.ZstdCompressor().compress)]


@pytest.mark.parametrize(("kind", "filename", "compress"), CUT_CASES, ids=[c[0] for c in CUT_CASES])
def test_a_compressed_file_cut_in_half_is_an_error_not_a_shorter_set(
        tmp_path: Path, kind: str, filename: str, compress: Callable[[bytes], bytes]) -> None:
    packed = compress(varied_records(4000))
    path = tmp_path / filename
    path.write_bytes(packed[: len(packed) // 2])
    read = 0
    with pytest.raises(InputError, match=rf"{path.name}:\d+: cannot read: the {kind} stream is corrupt or cut short"), \
            prompt_lines(path) as lines:
        for _ in lines:
            read += 1
    assert 0 < read < 4000


def test_a_zstd_file_of_several_frames_reads_them_all(tmp_path: Path) -> None:
    compress = zstandard.ZstdCompressor().compress
    path = tmp_path / "frames.jsonl.zst"
    path.write_bytes(compress(records(3, "a")) + compress(records(2, "b")) + compress(b""))
    with prompt_lines(path) as lines:
        assert [orjson.loads(line)["id"] for line in lines] == ["a0", "a1", "a2", "b0", "b1"]


def test_a_zstd_file_cut_inside_its_last_frame_is_truncated(tmp_path: Path) -> None:
    compress = zstandard.ZstdCompressor().compress
    path = tmp_path / "frames.jsonl.zst"
    path.write_bytes(compress(records(3, "a")) + compress(records(2, "b"))[:-3])
    with pytest.raises(InputError, match=r"frames\.jsonl\.zst:\d+: .*truncated: the file ends inside a zstd frame"), \
            prompt_lines(path) as lines:
        for _ in lines:
            pass


def test_missing_and_empty_paths(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file or directory"):
        resolve_prompt_files([tmp_path / "nope.jsonl"])
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(ConfigError, match=r"holds no prompt file \(it reads \*\.jsonl, \*\.jsonl\.gz, \*\.jsonl\.zst"):
        resolve_prompt_files([tmp_path / "empty-dir"])
    blank = write(tmp_path / "blank.jsonl", b"\n  \n")
    empty_gz = write(tmp_path / "empty.jsonl.gz", b"")
    full = write(tmp_path / "full.jsonl", records(1))
    files = resolve_prompt_files([blank, empty_gz, full])
    assert files.empty == [blank, empty_gz] and not files.all_empty


# -- through the CLI, on one simulated server ---------------------------------------------------------

@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    fleet = SimFleet([SimServerSpec(max_running=16, speed=200.0)], seed=0,
                     log_dir=tmp_path_factory.mktemp("sim-logs"))
    fleet.start(wait_ready=True)
    try:
        yield fleet.urls[0]
    finally:
        fleet.close()


@dataclass(frozen=True)
class CliCase:
    name: str
    make: Callable[[Path], Path]  # builds the --prompts argument under a directory
    extra: tuple[str, ...]
    code: int
    written: int | None  # None: some, not all (a stream that breaks part of the way)
    says: tuple[str, ...]


def _dir_of_formats(base: Path) -> Path:
    folder = base / "set"
    folder.mkdir()
    write(folder / "1.jsonl", records(2, "a"))
    write(folder / "2.jsonl.gz", records(2, "b"))
    write(folder / "3.jsonl.zst", records(2, "c"))
    (folder / "README.md").write_text("ignored")
    return folder


def _cut(path: Path, data: bytes) -> Path:
    write(path, data)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _empty_dir(base: Path) -> Path:
    (base / "set").mkdir()
    (base / "set" / "data.json").write_bytes(json_array(2))
    return base / "set"


INVALID = b'{"id": 1, "messages": []}\n{"messages": [{"role": "user", "content": "q"}]}\nnot json\n'
SHAREGPT = b"".join(orjson.dumps({"id": f"s{i}", "conversations": [{"from": "human", "value": f"q {i}"}]}) + b"\n"
                    for i in range(3))

CLI_CASES = [
    CliCase("gzip", lambda b: write(b / "p.jsonl.gz", records(4)), (), 0, 4, ("done 4",)),
    CliCase("zstd", lambda b: write(b / "p.jsonl.zst", records(4)), (), 0, 4, ("done 4",)),
    CliCase("BOM", lambda b: write(b / "p.jsonl", b"\xef\xbb\xbf" + records(3)), (), 0, 3,
            ("done 3", "skipped-invalid 0")),
    CliCase("zstd cut in half", lambda b: _cut(b / "p.jsonl.zst", varied_records(4000)), (), 3, None,
            ("p.jsonl.zst:", "cannot read: the zstd stream is corrupt or cut short (truncated")),
    CliCase("directory", _dir_of_formats, (), 0, 6, ("reading 3 prompt file(s) in sorted order", "done 6")),
    CliCase("JSON array", lambda b: write(b / "p.json", json_array(300)), (), 2, 0,
            ("holds one JSON array", "jq -c '.[]'", "p.jsonl")),
    CliCase("directory without prompt files", _empty_dir, (), 2, 0, ("the directory holds no prompt file",)),
    CliCase("missing file", lambda b: b / "nope.jsonl", (), 2, 0, ("no such file or directory",)),
    CliCase("ShareGPT file", lambda b: write(b / "chats.jsonl.gz", SHAREGPT), (), 2, 0,
            ("holds ShareGPT conversations", "Convert it first: python -m prompts.from_sharegpt",
             "--out", "chats.prompts.jsonl")),
    CliCase("empty file", lambda b: write(b / "p.jsonl", b""), (), 0, 0,
            ("warning: nothing to do: the prompt file(s) hold no record at all",)),
    CliCase("empty file, --strict", lambda b: write(b / "p.jsonl", b"\n"), ("--strict",), 3, 0,
            ("hold no record at all", "stopping because of --strict")),
    CliCase("no valid record", lambda b: write(b / "p.jsonl", INVALID), (), 3, 0,
            ("error: bad input: nothing was generated: none of the 3 record(s) in the prompt file(s) is valid",
             "p.jsonl:3: not valid JSON")),
    CliCase("no valid record, ShareGPT after the first", lambda b: write(b / "p.jsonl", b"not json\n" + SHAREGPT),
            (), 3, 0, ("nothing was generated: none of the 4 record(s) in the prompt file(s) is valid",
             "holds ShareGPT conversations", "convert it first with python -m prompts.from_sharegpt")),
    CliCase("no valid record, --strict", lambda b: write(b / "p.jsonl", INVALID), ("--strict",), 3, 0,
            ("p.jsonl:1:", "stopping because of --strict")),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.name for c in CLI_CASES])
def test_input_formats_through_the_cli(tmp_path: Path, sim_url: str, case: CliCase) -> None:
    prompts = case.make(tmp_path)
    out = tmp_path / "out"
    result = run_client(["--endpoints", sim_url, "--prompts", str(prompts), "--out", str(out), *case.extra],
                        timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.code == case.code, result.stderr
    for text in case.says:
        assert text in result.stderr, result.stderr
    if case.written is not None:
        assert count_written(out) == case.written


# -- SIGTERM during the start-up wait -----------------------------------------------------------------

@pytest.mark.timeout(90)
def test_sigterm_during_wait_ready_exits_130_with_a_message(tmp_path: Path) -> None:
    # A bound socket that never listens: every connection is refused, so the endpoint never answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        prompts = write(tmp_path / "p.jsonl", records(2))
        proc = subprocess.Popen(
            client_command(["--endpoints", url, "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                            "--wait-ready", "600"]),
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            assert proc.stderr is not None
            seen = []
            for line in proc.stderr:  # the observable event: the start-up wait has begun
                seen.append(line)
                if "waiting up to 600s (--wait-ready)" in line:
                    break
            else:
                raise AssertionError(f"the client ended (code {proc.wait()}) before waiting: {''.join(seen)}")
            proc.send_signal(signal.SIGTERM)
            rest = proc.stderr.read()
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 130, rest
    assert "stopped by Ctrl-C or SIGTERM; run the same command again to continue" in rest
    assert "Traceback" not in rest
