"""vLLM: recognised by `/v1/models` `owned_by: vllm`; takes the sampling extensions and
`chat_template_kwargs`; streams token ids with `return_token_ids: true` (`choices[0].token_ids` on each
chunk, `prompt_token_ids` on the first); counts a prompt at `/tokenize`; reports load in `vllm:` metrics."""

from __future__ import annotations

from client.fleet.profile import TOKEN_IDS_FIELD, ServerProfile
from client.wire.dialect import MetricNames, ReplyDialect

# vLLM renamed its cache gauge from gpu_cache_usage_perc to kv_cache_usage_perc, so both are read.
METRICS = MetricNames(running="vllm:num_requests_running", waiting="vllm:num_requests_waiting",
                      generated="vllm:generation_tokens_total",
                      usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"))

PROFILE = ServerProfile(
    name="vllm", label="vLLM", owned_by=("vllm",),
    extensions=frozenset({"top_k", "min_p", "chat_template_kwargs", TOKEN_IDS_FIELD, "continuous_usage_stats"}),
    id_fields={TOKEN_IDS_FIELD: True}, count_path="/tokenize",
    reply=ReplyDialect(choice_ids="token_ids", prompt_ids="prompt_token_ids", metrics=METRICS),
    ids_hint="vLLM with return_token_ids")
