"""The IAM permissions the S3 store's access-denied message and docs/s3.md name cover every S3 call the
store makes: a bucket policy written from either lets the run start and sync."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from client.s3.store import S3AccessError, S3Store, S3Url

REPO = Path(__file__).resolve().parent.parent
STORE = REPO / "client" / "s3" / "store.py"

# boto3 client operation -> the IAM action it needs (AWS's "Actions, resources, and condition keys for
# Amazon S3"). A call the store starts making must be added here, and so to the message and the docs.
ACTION_OF = {
    "head_bucket": "s3:ListBucket",
    "list_objects_v2": "s3:ListBucket",
    "list_multipart_uploads": "s3:ListBucketMultipartUploads",
    "get_object": "s3:GetObject",
    "head_object": "s3:GetObject",
    "put_object": "s3:PutObject",
    "create_multipart_upload": "s3:PutObject",
    "upload_part": "s3:PutObject",
    "complete_multipart_upload": "s3:PutObject",
    "abort_multipart_upload": "s3:AbortMultipartUpload",
}


def store_operations() -> set[str]:
    """The boto3 operations store.py calls: `self._client.OP(...)` and `self._call(action, "OP", ...)`."""
    found = set()
    for node in ast.walk(ast.parse(STORE.read_text())):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        target = node.func.value
        if isinstance(target, ast.Attribute) and target.attr == "_client":
            found.add(node.func.attr)
        elif node.func.attr == "_call" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            found.add(str(node.args[1].value))
    return found


def access_denied_message() -> str:
    error = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                         "ResponseMetadata": {"HTTPStatusCode": 403}}, "ListMultipartUploads")
    mapped = S3Store(S3Url.parse("s3://bucket/run"))._map(error, "list unfinished multipart uploads")
    assert isinstance(mapped, S3AccessError)
    return str(mapped)


def test_every_store_call_has_a_known_action() -> None:
    operations = store_operations()
    assert "list_multipart_uploads" in operations and "put_object" in operations, "the scan finds the calls"
    assert operations <= set(ACTION_OF), f"add the IAM action of {sorted(operations - set(ACTION_OF))} here"


@pytest.mark.parametrize("action", sorted({ACTION_OF[op] for op in store_operations() if op in ACTION_OF}))
def test_the_message_and_the_docs_name_each_action(action: str) -> None:
    assert action in access_denied_message()
    docs = (REPO / "docs" / "s3.md").read_text()
    assert f"`{action}`" in docs, f"docs/s3.md does not name {action}"
