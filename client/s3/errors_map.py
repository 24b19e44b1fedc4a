"""How botocore's exceptions become the project's S3 errors (client.core.errors): one table of S3 error
codes and HTTP statuses, and `mapped`, the context manager every S3 call of client.s3.store runs in.

The first row of `CODE_TABLE` that names the answer's code or status builds the error; an answer no row
names is an S3Error with S3's own code. Missing credentials are S3AccessError; no answer at all
(botocore's connection errors, OSError, timeouts) is S3Unavailable. Every text is redacted: an endpoint
URL may carry userinfo, and botocore quotes URLs and S3 its own messages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)

from client.core import redact
from client.core.errors import RegenError, S3AccessError, S3Conflict, S3Error, S3Unavailable

# The IAM actions behind the store's calls (docs/s3.md lists the same): head_bucket and list_objects_v2 need
# ListBucket, start-up's list_multipart_uploads needs ListBucketMultipartUploads (both on the bucket);
# the object reads, writes and multipart parts need GetObject, PutObject and AbortMultipartUpload.
PERMISSIONS = ("the client needs s3:ListBucket and s3:ListBucketMultipartUploads on the bucket, and "
               "s3:GetObject, s3:PutObject and s3:AbortMultipartUpload on the prefix")

MISSING_KEY_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
BOTO_ERRORS = (BotoCoreError, ClientError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class S3Step:
    """The call that failed: `action` as a person says it ("upload x"), `bucket`, and `where` (the store
    and its endpoint URL, already redacted)."""

    action: str
    bucket: str
    where: str


@dataclass(frozen=True, slots=True)
class Answer:
    """What S3 answered: its error code, message (redacted) and HTTP status (0 when not given)."""

    code: str
    message: str
    status: int


def _missing_bucket(answer: Answer, step: S3Step) -> RegenError:
    return S3AccessError(f"bucket {step.bucket!r} does not exist ({step.where}): create it or fix --s3 (and "
                         "--s3-endpoint-url / AWS_DEFAULT_REGION)")


def _denied(answer: Answer, step: S3Step) -> RegenError:
    return S3AccessError(f"access denied to {step.action} on {step.where} ({answer.code}: {answer.message}): check "
                         f"the AWS credentials, the region and the bucket policy ({PERMISSIONS})")


def _conflict(answer: Answer, step: S3Step) -> RegenError:
    return S3Conflict(f"{step.action}: a conditional write did not hold ({answer.message})", answer.code)


def _busy(answer: Answer, step: S3Step) -> RegenError:
    return S3Unavailable(f"S3 busy or failing: {step.action}: {answer.code}: {answer.message}", answer.code)


_SERVER_STATUSES = frozenset({429, *range(500, 600)})

# (S3 error codes, HTTP statuses, builder): the first row naming the code or the status wins.
CODE_TABLE: tuple[tuple[frozenset[str], frozenset[int], Callable[[Answer, S3Step], RegenError]], ...] = (
    (frozenset({"NoSuchBucket"}), frozenset(), _missing_bucket),
    (frozenset({"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                "InvalidToken", "AllAccessDisabled", "AccountProblem"}), frozenset({403}), _denied),
    (frozenset({"PreconditionFailed", "ConditionalRequestConflict"}), frozenset({412}), _conflict),
    (frozenset({"SlowDown", "RequestTimeout", "ServiceUnavailable", "InternalError", "RequestTimeTooSkewed"}),
     _SERVER_STATUSES, _busy),
)


def answer_of(exc: ClientError) -> Answer:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return Answer(code, redact.text(str(error.get("Message", "")) or code), status)


def translate(exc: BaseException, step: S3Step) -> RegenError:
    """The project's error for botocore's (or the socket's) exception `exc` in `step`."""
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return S3AccessError(f"no usable AWS credentials to {step.action} on {step.where}: set AWS_PROFILE, or "
                             "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run on a host with an instance role")
    if isinstance(exc, ClientError):
        answer = answer_of(exc)
        for codes, statuses, build in CODE_TABLE:
            if answer.code in codes or answer.status in statuses:
                return build(answer, step)
        return S3Error(f"S3 refused to {step.action}: {answer.code}: {answer.message}", answer.code)
    if isinstance(exc, BotoCoreError | OSError | TimeoutError):
        return S3Unavailable(f"cannot reach S3 ({step.where}) to {step.action}: {redact.text(str(exc))}")
    return S3Error(f"{step.action}: {type(exc).__name__}: {redact.text(str(exc))}")


@contextlib.contextmanager
def mapped(step: S3Step) -> Iterator[None]:
    """Raise the project's error for a botocore or socket exception of the block."""
    try:
        yield
    except BOTO_ERRORS as exc:
        raise translate(exc, step) from exc
