"""Any other OpenAI-compatible server (a gateway, another engine): standard fields only, no token ids, no
prompt count. The kind of a server that names no kind the client knows."""

from __future__ import annotations

from client.fleet.profile import ServerProfile

PROFILE = ServerProfile(name="other", label="an OpenAI-compatible server")
