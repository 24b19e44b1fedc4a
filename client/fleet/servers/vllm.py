"""vLLM: recognised by `/v1/models` `owned_by: vllm`; takes the sampling extensions and
`chat_template_kwargs`; streams token ids with `return_token_ids: true`; counts a prompt at `/tokenize`."""

from __future__ import annotations

from client.fleet.profile import TOKEN_IDS_FIELD, ServerProfile

PROFILE = ServerProfile(
    name="vllm", label="vLLM", owned_by=("vllm",),
    extensions=frozenset({"top_k", "min_p", "chat_template_kwargs", TOKEN_IDS_FIELD, "continuous_usage_stats"}),
    id_fields={TOKEN_IDS_FIELD: True}, count_path="/tokenize")
