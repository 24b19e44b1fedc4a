"""ResultRecord and FailureRecord as written to the segments and the failures file (see
docs/data-contracts.md); `id` goes first so the done-ID scan reads it without parsing the line."""

from __future__ import annotations

import time
from typing import Any

from client.core.errors import AttemptError, FillsWindow
from client.core.records import FailureRecord, Prompt, ResultRecord, prompt_sha256
from client.engine.retry import Generation


def result_record(record_id: str, prompt: Prompt, messages: list[dict[str, Any]], generation: Generation, *,
                  sampling: dict[str, Any], model: str, conversation: tuple[str, int] | None = None,
                  diverged: str | None = None, ended_early: str | None = None) -> ResultRecord:
    completion, ttft = generation.completion, generation.ttft_s
    record: ResultRecord = {
        "id": record_id,
        "messages": messages,
        "sampling": sampling,
        "reasoning": completion.reasoning,
        "content": completion.content,
        "tool_calls": [call.to_wire() for call in completion.tool_calls],
        "finish_reason": completion.finish_reason,
        "usage": completion.usage,
        "model": completion.model or model,
        "endpoint": generation.endpoint.url,
        "timings": {"queued_s": round(generation.queued_s, 4), "ttft_s": None if ttft is None else round(ttft, 4),
                    "total_s": round(generation.total_s, 4)},
        "attempts": generation.attempts,
        "created": time.time(),
    }
    if prompt.tools:
        record["tools"] = prompt.tools
    if completion.prompt_token_ids is not None:
        record["prompt_token_ids"] = completion.prompt_token_ids
    if completion.completion_token_ids is not None:
        record["completion_token_ids"] = completion.completion_token_ids
    if completion.spec is not None:
        record["spec"] = completion.spec
    if completion.continued is not None:
        record["continued"] = completion.continued
    if generation.window is not None:
        cut = generation.window
        record["train_window"] = {"size": cut.size, "prompt_tokens": cut.prompt_tokens, "max_tokens": cut.max_tokens}
    if conversation is not None:
        record["conversation_id"], record["turn"] = conversation
    if diverged is not None:
        record["diverged"] = diverged
    if ended_early is not None:
        record["ended_early"] = ended_early
    if prompt.meta is not None:
        record["meta"] = prompt.meta
    record["prompt_sha256"] = prompt_sha256(prompt.messages, prompt.tools, prompt.meta)
    return record


def failure_record(record_id: str, error: AttemptError, attempts: int, endpoint_url: str | None) -> FailureRecord:
    record: FailureRecord = {
        "id": record_id,
        "error_class": error.kind,
        "last_error": str(error),
        "attempts": attempts,
        "endpoint": endpoint_url,
        "created": time.time(),
    }
    if isinstance(error, FillsWindow):
        record["train_window"] = error.window  # a resume with a wider window sends it again
    return record
