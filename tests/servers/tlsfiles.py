"""Test TLS material made with `trustme`: a throwaway CA and a server certificate for 127.0.0.1 and localhost.

    files = write_tls_files(tmp_path)      # TLSFiles(ca_cert, server_cert, server_key)
    start_oddserver(tls=files)             # the server side (harness)
    ssl.create_default_context(cafile=str(files.ca_cert))   # a client that trusts it

`python -m tests.servers.tlsfiles DIR` writes them and prints the three paths.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class TLSFiles:
    """PEM files: the CA's certificate, the server's chain (leaf first) and the server's private key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def write_tls_files(directory: Path | str, *, names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TLSFiles:
    """Write `ca.pem`, `server.pem` and `server.key` into `directory` (created if missing)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    leaf = ca.issue_cert(*names)
    files = TLSFiles(out / "ca.pem", out / "server.pem", out / "server.key")
    ca.cert_pem.write_to_path(str(files.ca_cert))
    with open(files.server_cert, "wb") as fh:
        for blob in leaf.cert_chain_pems:
            fh.write(blob.bytes())
    leaf.private_key_pem.write_to_path(str(files.server_key))
    return files


if __name__ == "__main__":
    made = write_tls_files(sys.argv[1] if len(sys.argv) > 1 else ".")
    print(made.ca_cert, made.server_cert, made.server_key, sep="\n")
