"""The one module that talks to S3: a typed surface over the few aioboto3 calls the sync needs, and the
mapping of botocore exceptions onto the project's error tree.

    RegenError
    ├── ConfigError
    │   └── S3AccessError      bucket missing, access denied, no credentials       (exit 2 at start-up)
    └── S3Error                an S3 call failed; the uploader backs off and retries
        ├── S3Unavailable      the store could not be reached, timed out or answered 5xx
        └── S3Conflict         a conditional write found another writer's object

aioboto3 has no type stubs, so everything untyped stays in here. Integrity: every body goes up with its
Content-MD5 (S3 refuses a body that does not match), and the callers compare the ETag S3 reports with
the one the bytes must give. botocore's own flexible checksums are set to `when_required` so that
S3-compatible stores that refuse the newer checksum headers work too.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aioboto3
from aiobotocore.config import AioConfig  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)

from client.core import redact
from client.core.errors import ConfigError, RegenError, S3AccessError, S3Conflict, S3Error, S3Unavailable

__all__ = ["S3AccessError", "S3Conflict", "S3Error", "S3Store", "S3Unavailable", "S3Url"]


_ACCESS_CODES = {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                 "InvalidToken", "AllAccessDisabled", "AccountProblem"}
_MISSING_BUCKET = {"NoSuchBucket"}
_MISSING_KEY = {"NoSuchKey", "404", "NotFound"}
_BUSY_CODES = {"SlowDown", "RequestTimeout", "ServiceUnavailable", "InternalError", "RequestTimeTooSkewed"}

# The IAM actions behind the calls below (docs/s3.md lists the same): head_bucket and list_objects_v2 need
# ListBucket, start-up's list_multipart_uploads needs ListBucketMultipartUploads (both on the bucket);
# the object reads, writes and multipart parts need GetObject, PutObject and AbortMultipartUpload.
PERMISSIONS = ("the client needs s3:ListBucket and s3:ListBucketMultipartUploads on the bucket, and "
               "s3:GetObject, s3:PutObject and s3:AbortMultipartUpload on the prefix")


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
            self._client = await self._context.__aenter__()
        except (BotoCoreError, ValueError) as exc:
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

    def _map(self, exc: BaseException, action: str) -> RegenError:
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return S3AccessError(f"no usable AWS credentials to {action} on {self._where()}: set AWS_PROFILE, or "
                                 "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run on a host with an instance role")
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            message = redact.text(str(error.get("Message", "")) or code)
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code in _MISSING_BUCKET:
                return S3AccessError(f"bucket {self.url.bucket!r} does not exist ({self._where()}): create it "
                                     "or fix --s3 (and --s3-endpoint-url / AWS_DEFAULT_REGION)")
            if code in _ACCESS_CODES or status == 403:
                return S3AccessError(f"access denied to {action} on {self._where()} ({code}: {message}): check "
                                     f"the AWS credentials, the region and the bucket policy ({PERMISSIONS})")
            if code == "PreconditionFailed" or status == 412:
                return S3Conflict(f"{action}: a conditional write did not hold ({message})", code)
            if code in _BUSY_CODES or status >= 500 or status == 429:
                return S3Unavailable(f"S3 busy or failing: {action}: {code}: {message}", code)
            return S3Error(f"S3 refused to {action}: {code}: {message}", code)
        if isinstance(exc, BotoCoreError | OSError | TimeoutError):
            return S3Unavailable(f"cannot reach S3 ({self._where()}) to {action}: {redact.text(str(exc))}")
        return S3Error(f"{action}: {type(exc).__name__}: {redact.text(str(exc))}")

    async def _call(self, action: str, operation: str, **params: Any) -> Any:
        try:
            return await getattr(self._client, operation)(Bucket=self.url.bucket, **params)
        except (BotoCoreError, ClientError, OSError, TimeoutError) as exc:
            raise self._map(exc, action) from exc

    # -- calls -----------------------------------------------------------------------------------------

    async def check_bucket(self) -> None:
        """Fail fast (S3AccessError / S3Unavailable) when the bucket cannot be reached or read."""
        try:
            await self._client.head_bucket(Bucket=self.url.bucket)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NotFound", "NoSuchBucket"):
                raise self._map(ClientError({"Error": {"Code": "NoSuchBucket"}}, "HeadBucket"),
                                "read the bucket") from exc
            raise self._map(exc, "read the bucket") from exc
        except (BotoCoreError, OSError, TimeoutError) as exc:
            raise self._map(exc, "read the bucket") from exc

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
            reply = await self._client.head_object(Bucket=self.url.bucket, Key=self.url.key(key))
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING_KEY:
                return None
            raise self._map(exc, f"check {key}") from exc
        except (BotoCoreError, OSError, TimeoutError) as exc:
            raise self._map(exc, f"check {key}") from exc
        return ObjectInfo(key, int(reply.get("ContentLength", 0)), str(reply.get("ETag", "")))

    async def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, or None when there is no such key."""
        try:
            reply = await self._client.get_object(Bucket=self.url.bucket, Key=self.url.key(key))
            async with reply["Body"] as body:
                data = await body.read()
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING_KEY:
                return None
            raise self._map(exc, f"read {key}") from exc
        except (BotoCoreError, OSError, TimeoutError) as exc:
            raise self._map(exc, f"read {key}") from exc
        return bytes(data), str(reply.get("ETag", ""))

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


def describe_error(exc: BaseException) -> str:
    """A one-line reason for the console, without the action prefix repeated."""
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."

