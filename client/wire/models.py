"""What a server's `/v1/models` says, parsed once: each served model's id, context length and owner.

One parse for every reader: readiness (the list answers at all), the model to request
(client.fleet.startup.resolve_model), whether --max-tokens fits the context (`max_model_len`, listed by
vLLM and SGLang) and the server's kind (`owned_by`: `sglang`, `vllm`; client.fleet.preflight). Entries
without an id are skipped; a field of the wrong type counts as absent. No I/O here: the endpoint fetches
(client.wire.endpoint.Endpoint.model_catalog).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ServedModel:
    id: str
    max_model_len: int | None = None  # the context, in tokens, when the server lists it
    owned_by: str = ""  # lower-cased


@dataclass(frozen=True, slots=True)
class ModelCatalog:
    models: tuple[ServedModel, ...]

    @property
    def ids(self) -> list[str]:
        return [model.id for model in self.models]

    @property
    def owners(self) -> frozenset[str]:
        return frozenset(model.owned_by for model in self.models)

    def get(self, model_id: str) -> ServedModel | None:
        return next((model for model in self.models if model.id == model_id), None)


def parse_models(document: Any) -> ModelCatalog:
    """An OpenAI-style `{"data": [{"id", "owned_by", "max_model_len", ...}, ...]}`; anything else lists none."""
    entries = document.get("data") if isinstance(document, dict) else None
    models = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or "id" not in entry:
            continue
        context = entry.get("max_model_len")
        models.append(ServedModel(
            id=str(entry["id"]),
            max_model_len=context if isinstance(context, int) and not isinstance(context, bool) else None,
            owned_by=str(entry.get("owned_by") or "").lower(),
        ))
    return ModelCatalog(tuple(models))
