"""The one module that talks to S3: a typed surface over the few aioboto3 calls the sync needs. Every call
runs in client.s3.errors_map.mapped, which turns botocore's exceptions into the S3 classes of the
project's tree (client.core.errors): S3AccessError (exit 2 at start-up), S3Unavailable, S3Conflict, S3Error.

aioboto3 has no type stubs, so everything untyped stays in here. Integrity: every body goes up with its
Content-MD5 (S3 refuses a body that does not match), and the callers compare the ETag S3 reports with
the one the bytes must give. botocore's own flexible checksums are set to `when_required` so that
S3-compatible stores that refuse the newer checksum headers work too.

Time on S3's clock: `get_dated` gives an object's age as S3 sees it, its answer's `Date` header minus the
object's `LastModified`, so a reader judges a writer's heartbeat without trusting either host's clock.
"""

from __future__ import annotations

import base64
import re
import time
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any

import aioboto3
from aiobotocore.config import AioConfig  # type: ignore[import-untyped]
from botocore.exceptions import ClientError  # type: ignore[import-untyped]

from client.core import redact
from client.core.errors import ConfigError, RegenError, S3AccessError, S3Conflict, S3Error, S3Unavailable
from client.s3.errors_map import MISSING_KEY_CODES, S3Step, answer_of, mapped, translate

__all__ = ["S3AccessError", "S3Conflict", "S3Error", "S3Store", "S3Unavailable", "S3Url"]


@dataclass(frozen=True, slots=True)
class S3Url:
    """`s3://bucket/prefix`: where a run's results live. Keys are made relative to the prefix."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, text: str) -> S3Url:
        match = re.fullmatch(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(?:/(.*))?", text.strip())
        if not match:
            raise ConfigError(f"--s3 must look like s3://bucket/prefix, got {text!r}")
        prefix = (match.group(2) or "").strip("/")
        return cls(match.group(1), prefix + "/" if prefix else "")

    def key(self, relative: str) -> str:
        return self.prefix + relative

    def relative(self, key: str) -> str:
        return key[len(self.prefix):] if key.startswith(self.prefix) else key

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    etag: str


@dataclass(frozen=True, slots=True)
class DatedObject:
    """An object's bytes and ETag, and its age in seconds on S3's clock (None when S3 dates neither)."""

    body: bytes
    etag: str
    age_s: float | None


def object_age(reply: dict[str, Any]) -> float | None:
    """S3's `Date` minus the object's `LastModified`: its age on S3's own clock. Without a Date header (a
    proxy that drops it), this host's clock stands in for S3's; without LastModified, None."""
    modified = reply.get("LastModified")
    if not isinstance(modified, datetime):
        return None
    header = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        now = parsedate_to_datetime(header).timestamp() if header else time.time()
    except (TypeError, ValueError):
        now = time.time()
    return max(0.0, now - modified.timestamp())


def _b64(md5_digest: bytes) -> str:
    return base64.b64encode(md5_digest).decode()


class S3Store:
    """An open S3 client bound to one `S3Url`. Use as `async with S3Store(...) as store:`."""

    def __init__(self, url: S3Url, *, endpoint_url: str | None = None, connect_timeout: float = 10.0,
                 read_timeout: float = 60.0, attempts: int = 3) -> None:
        self.url = url
        self.endpoint_url = endpoint_url
        self._config = AioConfig(
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            retries={"mode": "standard", "total_max_attempts": attempts},
            request_checksum_calculation="when_required", response_checksum_validation="when_required",
            max_pool_connections=64,
        )
        self._context: Any = None
        self._client: Any = None

    async def __aenter__(self) -> S3Store:
        self._context = aioboto3.Session().client("s3", endpoint_url=self.endpoint_url, config=self._config)
        try:
            with mapped(self._step("open the S3 client")):
                self._client = await self._context.__aenter__()
        except ValueError as exc:  # botocore's refusal of a malformed endpoint URL or region
            raise self._map(exc, "open the S3 client") from exc
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._context is not None:
            await self._context.__aexit__(kind, exc, tb)
            self._context = self._client = None

    # -- error mapping ---------------------------------------------------------------------------------

    def _where(self) -> str:
        # An endpoint URL may carry userinfo, and botocore quotes the URL in its own messages too.
        return f"{self.url}" + (f" at {redact.url(self.endpoint_url)}" if self.endpoint_url else "")

    def _step(self, action: str) -> S3Step:
        return S3Step(action, self.url.bucket, self._where())

    def _map(self, exc: BaseException, action: str) -> RegenError:
        return translate(exc, self._step(action))

    async def _call(self, action: str, operation: str, **params: Any) -> Any:
        with mapped(self._step(action)):
            return await getattr(self._client, operation)(Bucket=self.url.bucket, **params)

    # -- calls -----------------------------------------------------------------------------------------

    async def check_bucket(self) -> None:
        """Fail fast (S3AccessError / S3Unavailable) when the bucket cannot be reached or read."""
        try:
            with mapped(self._step("read the bucket")):
                await self._client.head_bucket(Bucket=self.url.bucket)
        except S3Error as exc:
            if exc.code in ("404", "NotFound"):  # HEAD has no body: a missing bucket is only its status
                raise self._map(ClientError({"Error": {"Code": "NoSuchBucket"}}, "HeadBucket"),
                                "read the bucket") from exc
            raise

    async def put(self, key: str, body: bytes, md5_digest: bytes, *, content_type: str = "application/octet-stream",
                  if_match: str | None = None, if_none_match: bool = False) -> tuple[str, str]:
        """One PUT with its Content-MD5; returns (ETag, server-side encryption)."""
        extra: dict[str, str] = {}
        if if_match is not None:
            extra["IfMatch"] = if_match
        if if_none_match:
            extra["IfNoneMatch"] = "*"
        reply = await self._call(f"upload {key}", "put_object", Key=self.url.key(key), Body=body,
                                 ContentMD5=_b64(md5_digest), ContentType=content_type, **extra)
        return str(reply.get("ETag", "")), str(reply.get("ServerSideEncryption", ""))

    async def create_multipart(self, key: str, content_type: str) -> str:
        reply = await self._call(f"start the multipart upload of {key}", "create_multipart_upload",
                                 Key=self.url.key(key), ContentType=content_type)
        return str(reply["UploadId"])

    async def upload_part(self, key: str, upload_id: str, number: int, body: bytes, md5_digest: bytes) -> str:
        reply = await self._call(f"upload part {number} of {key}", "upload_part", Key=self.url.key(key),
                                 UploadId=upload_id, PartNumber=number, Body=body, ContentMD5=_b64(md5_digest))
        return str(reply["ETag"])

    async def complete_multipart(self, key: str, upload_id: str, etags: list[str]) -> tuple[str, str]:
        parts = [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, start=1)]
        reply = await self._call(f"complete the multipart upload of {key}", "complete_multipart_upload",
                                 Key=self.url.key(key), UploadId=upload_id, MultipartUpload={"Parts": parts})
        return str(reply.get("ETag", "")), str(reply.get("ServerSideEncryption", ""))

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        await self._call(f"abort the multipart upload of {key}", "abort_multipart_upload",
                         Key=self.url.key(key), UploadId=upload_id)

    async def list_multipart(self, prefix: str) -> list[tuple[str, str]]:
        """(relative key, upload id) of the unfinished multipart uploads under `prefix`."""
        found: list[tuple[str, str]] = []
        params: dict[str, Any] = {"Prefix": self.url.key(prefix)}
        while True:
            reply = await self._call("list unfinished multipart uploads", "list_multipart_uploads", **params)
            found.extend((self.url.relative(u["Key"]), u["UploadId"]) for u in reply.get("Uploads", []))
            if not reply.get("IsTruncated"):
                return found
            params.update(KeyMarker=reply.get("NextKeyMarker", ""), UploadIdMarker=reply.get("NextUploadIdMarker", ""))

    async def head(self, key: str) -> ObjectInfo | None:
        try:
            with mapped(self._step(f"check {key}")):
                reply = await self._client.head_object(Bucket=self.url.bucket, Key=self.url.key(key))
        except S3Error as exc:
            if _missing_key(exc):
                return None
            raise
        return ObjectInfo(key, int(reply.get("ContentLength", 0)), str(reply.get("ETag", "")))

    async def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, or None when there is no such key."""
        got = await self.get_dated(key)
        return None if got is None else (got.body, got.etag)

    async def get_dated(self, key: str) -> DatedObject | None:
        """The object's bytes, ETag and age on S3's clock, or None when there is no such key."""
        try:
            with mapped(self._step(f"read {key}")):
                reply = await self._client.get_object(Bucket=self.url.bucket, Key=self.url.key(key))
                async with reply["Body"] as body:
                    data = await body.read()
        except S3Error as exc:
            if _missing_key(exc):
                return None
            raise
        return DatedObject(bytes(data), str(reply.get("ETag", "")), object_age(reply))

    async def list_objects(self, prefix: str) -> list[ObjectInfo]:
        """Every object under `prefix` (relative keys), following continuation tokens."""
        found: list[ObjectInfo] = []
        params: dict[str, Any] = {"Prefix": self.url.key(prefix)}
        while True:
            reply = await self._call(f"list {self.url.key(prefix)}", "list_objects_v2", **params)
            found.extend(ObjectInfo(self.url.relative(o["Key"]), int(o.get("Size", 0)), str(o.get("ETag", "")))
                         for o in reply.get("Contents", []))
            token = reply.get("NextContinuationToken")
            if not reply.get("IsTruncated") or not token:
                return found
            params["ContinuationToken"] = token


def _missing_key(exc: S3Error) -> bool:
    """No such key: an answer, not a failure, for `head` and `get`."""
    return isinstance(exc.__cause__, ClientError) and answer_of(exc.__cause__).code in MISSING_KEY_CODES


def describe_error(exc: BaseException) -> str:
    """A one-line reason for the console, without the action prefix repeated."""
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."

