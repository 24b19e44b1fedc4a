"""A real S3 protocol server for the tests: moto's server in a subprocess on 127.0.0.1, whose objects
survive a stop and restart on the same port, and which can hold segment uploads on request.

Persistence uses moto's own recorder: every request is appended to a file, and a restarted server
replays that file into itself on a private port before it listens on the public one (so a client never
sees a half-restored store). Replay cannot carry multipart uploads (their upload ids change), so tests
that restart the server keep segments below the multipart size.

Holding: while `<state>/hold` exists, a PUT of a segment body waits before moto sees it, after writing
`<state>/held`; a test uses it to kill a client in the middle of an upload.

Refusing multipart: while `<state>/no_multipart` exists, every multipart call (start, part, complete,
abort, list) answers 501 NotImplemented, as S3-compatible stores without a multipart API do.

S3's clock: `<state>/clock_ahead.json` maps a key prefix to seconds; an answer to a request whose path
names that prefix carries a `Date` header that many seconds ahead, so the objects there look that much
older on S3's clock (time has passed on S3), and nothing else on the shared server changes.

Run as `python -m tests.s3_server --port P --state DIR`.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from client.core.ids import decode_ledger

REPO = Path(__file__).resolve().parent.parent
BUCKET = "regen-test"
FAKE_AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
UNSET_AWS_ENV = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


# -- the server process ------------------------------------------------------------------------------

class _Hold:
    def __init__(self, app: Callable[..., Iterable[bytes]], state: Path) -> None:
        self.app = app
        self.hold = state / "hold"
        self.held = state / "held"

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if (environ.get("REQUEST_METHOD") == "PUT" and "/segments/" in path and ".jsonl" in path
                and self.hold.exists()):
            self.held.write_text(path)
            deadline = time.monotonic() + 120
            while self.hold.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return self.app(environ, start_response)


_NOT_IMPLEMENTED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NotImplemented</Code><Message>A header '
                    b'you provided implies functionality that is not implemented</Message></Error>')
_MULTIPART_QUERY = ("uploads", "uploadId", "partNumber")


class _NoMultipart:
    def __init__(self, app: Callable[..., Iterable[bytes]], state: Path) -> None:
        self.app = app
        self.flag = state / "no_multipart"

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        query = environ.get("QUERY_STRING", "")
        names = {part.split("=", 1)[0] for part in query.split("&") if part}
        if names.intersection(_MULTIPART_QUERY) and self.flag.exists():
            start_response("501 Not Implemented", [("Content-Type", "application/xml"),
                                                   ("Content-Length", str(len(_NOT_IMPLEMENTED)))])
            return [_NOT_IMPLEMENTED]
        return self.app(environ, start_response)


def _clock_ahead(state: Path, path: str) -> float:
    try:
        offsets = json.loads((state / "clock_ahead.json").read_text())
    except (OSError, ValueError):
        return 0.0
    return float(sum(seconds for prefix, seconds in offsets.items() if prefix in path))


def _handler(base: type, state: Path) -> type:
    """The request handler, its Date header moved ahead where `clock_ahead.json` says."""

    class Handler(base):  # type: ignore[misc, valid-type]
        def date_time_string(self, timestamp: float | None = None) -> str:
            ahead = _clock_ahead(state, getattr(self, "path", ""))
            return str(super().date_time_string((time.time() if timestamp is None else timestamp) + ahead))

    return Handler


def serve(port: int, state: Path) -> None:
    state.mkdir(parents=True, exist_ok=True)
    recording = state / "recording.jsonl"
    os.environ["MOTO_ENABLE_RECORDING"] = "1"
    os.environ["MOTO_RECORDER_FILEPATH"] = str(recording)
    from moto.moto_api import recorder
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    if recording.exists() and recording.stat().st_size:
        private = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
        thread = threading.Thread(target=private.serve_forever, daemon=True)
        thread.start()
        recorder.replay_recording(target_host=f"http://127.0.0.1:{private.server_port}")
        private.shutdown()
        private.server_close()
    server = make_server("127.0.0.1", port, _NoMultipart(_Hold(app, state), state), threaded=True,
                         request_handler=_handler(MotoRequestHandler, state))
    server.serve_forever()


# -- the test-side handle ----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """One moto server subprocess; `restart()` brings it back on the same port with its objects."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._client: Any = None

    def start(self, timeout: float = 30.0) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        log = (self.state / "server.log").open("ab")
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.s3_server", "--port", str(self.port),
                                       "--state", str(self.state)], cwd=REPO, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the S3 server exited; see {self.state / 'server.log'}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(self.url + "/moto-api/", timeout=1).close()
                return
            time.sleep(0.1)
        raise RuntimeError(f"the S3 server did not come up in {timeout:.0f} s; see {self.state / 'server.log'}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def client(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3", endpoint_url=self.url, region_name="us-east-1", aws_access_key_id="testing",
                aws_secret_access_key="testing", config=Config(
                retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=2, read_timeout=10))
        return self._client

    def create_bucket(self, name: str = BUCKET) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    # holding uploads

    def hold_uploads(self) -> None:
        (self.state / "held").unlink(missing_ok=True)
        (self.state / "hold").touch()

    def release_uploads(self) -> None:
        (self.state / "hold").unlink(missing_ok=True)

    def refuse_multipart(self) -> None:
        """From now on, every multipart call answers 501 NotImplemented."""
        (self.state / "no_multipart").touch()

    def clock_ahead(self, prefix: str, seconds: float) -> None:
        """From now on, S3's clock reads `seconds` later for the keys under `prefix` (this test's own):
        what is stored there looks that much older, as if that much time had passed."""
        path = self.state / "clock_ahead.json"
        offsets = json.loads(path.read_text()) if path.exists() else {}
        offsets[prefix] = seconds
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(offsets))
        temporary.replace(path)

    def wait_held(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (self.state / "held").exists():
                return (self.state / "held").read_text()
            time.sleep(0.05)
        return None

    # reading what is stored

    def keys(self, bucket: str, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys

    def get(self, bucket: str, key: str) -> bytes:
        return bytes(self.client().get_object(Bucket=bucket, Key=key)["Body"].read())


def read_s3_results(server: S3Server, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """Every record of every segment the manifests list, after checking each object against its entry
    (length, SHA-256, ETag), its id index and its counts. Fails on an invalid line or on any segment
    object that no manifest lists."""
    prefix = prefix.strip("/") + "/"
    listed: set[str] = set()
    records: list[dict[str, Any]] = []
    for key in server.keys(bucket, prefix + "manifests/"):
        manifest = orjson.loads(server.get(bucket, key))
        assert manifest["totals"]["records"] == sum(s["records"] for s in manifest["segments"]), key
        for entry in manifest["segments"]:
            body = server.get(bucket, prefix + entry["key"])
            assert len(body) == entry["stored_bytes"], entry["key"]
            assert hashlib.sha256(body).hexdigest() == entry["sha256"], entry["key"]
            head = server.client().head_object(Bucket=bucket, Key=prefix + entry["key"])
            assert head["ETag"].strip('"') == entry["etag"], entry["key"]
            data = gzip.decompress(body) if entry["gzip"] else body
            assert len(data) == entry["bytes"], entry["key"]
            ids_blob = server.get(bucket, prefix + entry["ids_key"])
            assert hashlib.sha256(ids_blob).hexdigest() == entry["ids_sha256"], entry["ids_key"]
            lines = data.splitlines()
            parsed = []
            for number, line in enumerate(lines, start=1):
                try:
                    parsed.append(orjson.loads(line))
                except orjson.JSONDecodeError as exc:  # pragma: no cover - the assertion is the point
                    raise AssertionError(f"{entry['key']}:{number} is not valid JSON: {line[:100]!r}") from exc
            assert [r["id"] for r in parsed] == decode_ledger(gzip.decompress(ids_blob)), entry["key"]
            assert len(parsed) == entry["records"], entry["key"]
            assert sum(r["usage"]["completion_tokens"] for r in parsed) == entry["completion_tokens"], entry["key"]
            listed.update((prefix + entry["key"], prefix + entry["ids_key"]))
            records.extend(parsed)
    orphans = [key for key in server.keys(bucket, prefix + "segments/") if key not in listed]
    assert not orphans, f"segment objects no manifest lists: {orphans[:5]}"
    return records


@contextlib.contextmanager
def running_s3(state: Path) -> Iterator[S3Server]:
    from tests.engines.start_time import SMALL_SERVER_START_S, server_start  # pytest: not in the server's process

    server = S3Server(state)
    with server_start():  # its own bound, while it lives; not the time limit of the test that needs it
        server.start(timeout=SMALL_SERVER_START_S)
    try:
        yield server
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args()
    serve(args.port, args.state)


if __name__ == "__main__":
    main()
