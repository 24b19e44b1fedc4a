"""Start-up with a million done ids in S3: the S3 resume against the local one, in the same run.

A moto S3 server (subprocess on 127.0.0.1) is filled with what a run leaves behind: W writers'
manifests listing S segments, each with its gzip id index (the segment bodies are not stored: resume
never reads them). Then, for an empty --out, the real start-up path (`client.s3.resume.start`: bucket
check, manifests, every id index, the scan for unuploaded local segments) is timed; the
baseline is the local resume (`client.local.ledger.read_done_ids`) over the same ids held as local `.ids`
sidecars. Both build the same done-id set. moto is a single Python process, so against AWS S3 (which
answers the 32 parallel GETs independently) the S3 figure is an upper bound.

    python -m bench.s3_resume [--ids 1000000] [--segments 250,1000] [--writers 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3

from client.local.ledger import read_done_ids
from client.s3.manifest import Manifest, SegmentEntry, encode_ids, ids_key, manifest_key, segment_key
from client.s3.resume import start
from client.s3.store import S3Store, S3Url

BUCKET = "bench-resume"


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def make_ids(total: int, segments: int) -> list[list[str]]:
    per = -(-total // segments)
    return [[f"prompt-{n:09d}" for n in range(s * per, min(total, (s + 1) * per))] for s in range(segments)]


async def fill(store: S3Store, chunks: list[list[str]], writers: int) -> None:
    manifests = [Manifest(writer=f"host{w}-{w}of{writers}", host=f"host{w}", shard=f"{w}/{writers}",
                          state="finished") for w in range(writers)]
    semaphore = asyncio.Semaphore(32)

    async def put_index(number: int, ids: list[str]) -> None:
        manifest = manifests[number % writers]
        name = f"{manifest.writer}-bench-{number:05d}"
        blob = encode_ids(ids)
        async with semaphore:
            await store.put(ids_key(name), blob, hashlib.md5(blob).digest())
        manifest.segments[name] = SegmentEntry(
            name=name, key=segment_key(name, False), ids_key=ids_key(name), records=len(ids),
            completion_tokens=0, bytes=0, stored_bytes=0, gzip=False, sha256="", etag="",
            ids_sha256=hashlib.sha256(blob).hexdigest(), uploaded=time.time())

    await asyncio.gather(*(put_index(n, ids) for n, ids in enumerate(chunks)))
    for manifest in manifests:
        body = manifest.to_json()
        await store.put(manifest_key(manifest.writer), body, hashlib.md5(body).digest())


async def time_s3(store: S3Store, empty: Path, expected: int) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one S3 start-up."""
    done: set[str] = set()
    began, cpu = time.perf_counter(), time.process_time()
    await start(store, segments_dir=empty, writer="fresh-0of1", host="fresh", shard="0/1", run_id="bench",
                sync_interval_s=180, done=done)
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    assert len(done) == expected, (len(done), expected)
    return elapsed, cpu


def time_local(chunks: list[list[str]], root: Path, expected: int) -> float:
    segments = root / "segments"
    segments.mkdir(parents=True, exist_ok=True)
    for number, ids in enumerate(chunks):
        (segments / f"seg-{number:05d}.jsonl").write_bytes(b"")
        (segments / f"seg-{number:05d}.ids").write_bytes("\n".join(ids).encode() + b"\n")
    began = time.perf_counter()
    done, _ = read_done_ids(segments)
    elapsed = time.perf_counter() - began
    assert len(done) == expected
    return elapsed


async def bench_case(url: str, total: int, segments: int, writers: int,
                     repeat: int) -> tuple[float, float, float]:
    chunks = make_ids(total, segments)
    prefix = f"case-{segments}"
    async with S3Store(S3Url.parse(f"s3://{BUCKET}/{prefix}"), endpoint_url=url) as store:
        await fill(store, chunks, writers)
        with tempfile.TemporaryDirectory() as tmp:
            s3_runs = [await time_s3(store, Path(tmp) / "empty", total) for _ in range(repeat)]
            local_times = [time_local(chunks, Path(tmp) / "local", total) for _ in range(repeat)]
    return (statistics.median(r[0] for r in s3_runs), statistics.median(r[1] for r in s3_runs),
            statistics.median(local_times))


async def main_async(args: argparse.Namespace) -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with moto_server() as url:
        boto3.client("s3", endpoint_url=url).create_bucket(Bucket=BUCKET)
        print("| done ids | segments (id indexes) | manifests | S3 resume, wall (s) | of which client CPU (s) "
              "| local resume (s) | S3 / local |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for segments in args.segments:
            s3_s, cpu_s, local_s = await bench_case(url, args.ids, segments, args.writers, args.repeat)
            print(f"| {args.ids:,} | {segments:,} | {args.writers} | {s3_s:.2f} | {cpu_s:.2f} | {local_s:.2f} | "
                  f"{s3_s / local_s:.1f}x |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--segments", type=lambda t: [int(x) for x in t.split(",")], default=[250, 1000])
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
