"""Small misbehaving HTTP servers for wire conformance tests, on raw asyncio sockets (standard library only,
plus `trustme` for test certificates).

- `oddserver`: an OpenAI-compatible chat server whose misbehaviour is chosen by name (`--mode`).
- `proxies`: a path-prefix reverse proxy and a forward proxy (absolute-form and CONNECT).
- `tlsfiles`: a test CA and a server certificate for 127.0.0.1 / localhost.
- `harness`: starts any of them as a subprocess, waits until it listens, reads its request log, stops it.
- `chatwire`: the fixed answer and the JSON/SSE bytes of the chat server.
- `httpwire`: the HTTP/1.x framing, request log and serve loop the servers share.
- `rawhttp`: standard-library request/response/chunked/SSE helpers for checking the servers themselves.
"""
