"""`--endpoints` parsing: lists and files, one server however its base URL is spelled, and errors that
never echo the credentials of a URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.core.errors import ConfigError
from client.fleet.startup import parse_endpoints


@pytest.mark.parametrize(("spec", "urls"), [
    ("http://a:1", ["http://a:1"]),
    ("http://a:1, http://b:2/v1/ ,", ["http://a:1", "http://b:2/v1/"]),
    ("https://user:key@gw.example/api/x/v1", ["https://user:key@gw.example/api/x/v1"]),
])
def test_accepts(spec: str, urls: list[str]) -> None:
    assert parse_endpoints(spec) == urls


@pytest.mark.parametrize(("spec", "message"), [
    ("", "--endpoints: no endpoint URLs given"),
    ("ftp://u:secret@h", "--endpoints: not an http(s) URL: 'ftp://***@h'"),
    ("h:30000", "not an http(s) URL"),
    ("http://u:secret@h:1,http://h:1/v1", "--endpoints: endpoint listed twice: http://h:1/v1"),
    ("http://h:1/,http://h:1", "endpoint listed twice"),
    ("http://h:99999", "bad port"),
])
def test_refuses_without_showing_credentials(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_endpoints(spec)
    assert message in str(caught.value)
    assert "secret" not in str(caught.value)


def test_reads_a_file_with_comments(tmp_path: Path) -> None:
    listing = tmp_path / "endpoints.txt"
    listing.write_text("# node 1\nhttp://10.0.0.5:30000  # gpu 0\n\nhttp://10.0.0.5:30001/v1\n")
    assert parse_endpoints(f"@{listing}") == ["http://10.0.0.5:30000", "http://10.0.0.5:30001/v1"]
    with pytest.raises(ConfigError, match="cannot read"):
        parse_endpoints(f"@{tmp_path / 'missing.txt'}")


def test_a_file_given_without_its_at_sign_is_named_with_the_fix(tmp_path: Path) -> None:
    listing = tmp_path / "servers" / "endpoints.txt"
    listing.parent.mkdir()
    listing.write_text("http://10.0.0.5:30000\n")
    with pytest.raises(ConfigError) as caught:
        parse_endpoints(str(listing))
    assert str(caught.value) == (f"--endpoints: {str(listing)!r} is a file, not an http(s) URL: to read the "
                                 f"endpoints from it, write --endpoints @{listing}")
    with pytest.raises(ConfigError, match=r"not an http\(s\) URL: 'runs/servers/missing\.txt' \(expected"):
        parse_endpoints("runs/servers/missing.txt")  # no such file: no advice about one
