"""Any other OpenAI-compatible server (a gateway, another engine): standard fields only, no token ids, no
prompt count, no load metrics the client reads. The kind of a server that names no kind the client knows,
and the field set `--compat openai` forces. Its one name is `openai` (older code called it `other`, still
accepted)."""

from __future__ import annotations

from client.core.payload import STANDARD
from client.fleet.profile import ServerProfile

PROFILE = ServerProfile(name=STANDARD, label="an OpenAI-compatible server", aliases=("other",))
