"""The export formats, one entry each: the one place that says what a format is. `client.export.main` reads
it for `--format` and its help, `client.export.build` for the rules a format carries, `client.export.rows`
for the trainer's supervision floor, `client.export.writers` for the writer. Imports nothing of the
`export` extra, so `--help` works without it.

Adding a format: an entry here, its line in `client.export.rows` (a `line` function), and its writer kind
in `client.export.writers` (`jsonl` or `parquet`); tests/test_export_formats.py and the trainers' tests
read it back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ExportFormat:
    name: str
    help: str  # one line of --help: who reads it, what a line holds
    storage: str  # "jsonl" or "parquet" (needs pyarrow)
    rerendered: bool  # the trainer re-renders the text: the template check runs by default and refuses
    min_supervised: int  # the fewest supervised tokens the trainer keeps in a row
    conversation_rows: bool = False  # --rows conversation is possible


FORMATS: dict[str, ExportFormat] = {f.name: f for f in (
    ExportFormat("parquet", "id, input_ids, loss_mask (0 prompt, 1 completion), seq_len; speculators reads it as "
                 "--data hf:<folder>", "parquet", rerendered=False, min_supervised=2),
    ExportFormat("specforge", 'SpecForge conversation JSONL (data.train_data_path): {"id", "conversations": '
                 '[{"role", "content", "reasoning_content", "tool_calls", ...}], "tools"}; the trainer '
                 "re-renders it with the tokenizer's chat template", "jsonl", rerendered=True, min_supervised=2,
                 conversation_rows=True),
    ExportFormat("specforge-tokenized", 'SpecForge pre-tokenized JSONL (data.prompts_path): {"id", "input_ids", '
                 '"loss_mask"}', "jsonl", rerendered=False, min_supervised=2),
    ExportFormat("speculators", 'speculators prepare-data rows: {"id", "primary_id", "input_ids", "loss_mask", '
                 '"metadata"}', "jsonl", rerendered=False, min_supervised=1),
)}
DEFAULT_FORMAT = "parquet"
