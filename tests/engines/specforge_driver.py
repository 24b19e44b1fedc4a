"""Run SpecForge 0.2.0's own prompt preparation on a file and print the rows it keeps (runs in .venv-specforge).

This script owns one thing: driving the real data path of a SpecForge DFlash run on the CPU, as its trainer
does it, and writing what comes out. It imports the standard library and SpecForge (with the packages
SpecForge imports), never the project. The project side is tests/engines/trainers.py.

The call chain is the trainer's own, from the config a user writes down to the rows:

1. ``specforge.config.Config.model_validate(...)``: the run's config, ``data.prompts_path`` (``--path
   tokenized``) or ``data.train_data_path`` (``--path conversation``), ``data.max_length``,
   ``data.chat_template`` (default ``qwen3.5``), ``data.train_only_last_turn``, ``training.strategy: dflash``.
2. ``specforge.algorithms.builtin.builtin_algorithm_registry().resolve("dflash")``, as
   ``specforge/application/composition.py`` resolves the strategy.
3. ``specforge.training.assembly._load_text_tokenizer(cfg)``: ``AutoTokenizer.from_pretrained`` of
   ``model.target_model_path`` (here the tokenizer directory), with SpecForge's pad-token fallback.
4. ``specforge.training.assembly._prepare_prompts(cfg, tokenizer, algorithm=..., draft_config=...)``, as the
   online producer (``specforge/training/disaggregated.py``) calls it. It calls
   ``specforge.data.prompt_builder.prepare_prompt_tasks`` with the DFlash provider's ``minimum_loss_tokens``
   (2) and ``loss_mask_filter`` (``specforge.data.loss_mask.has_consecutive_supervised_tokens``).
   ``prepare_prompt_tasks`` decides the path from the file's first record, whatever the config key: with
   ``input_ids`` and ``loss_mask`` it is the pre-tokenized path (``_prompt_from_record``: cut to max_length,
   drop below the minimum, then the adjacency filter); otherwise ``datasets.load_dataset("json")`` and
   ``specforge.data.preprocessing.build_eagle3_dataset`` (shuffled with seed 42; ``ThinkingParser`` of
   ``specforge/data/parse.py`` renders with the tokenizer's chat template and masks the spans the template's
   assistant-header regex finds), with the loss-mask filter set to None by ``prepare_prompt_tasks``.

What a GPU or distributed run would supply, stubbed to the minimum:

- ``draft_config`` is ``{"block_size": 16}``, the value DFlash writes into a draft config it generates
  (``populate_dflash_generated_config``); the real one is resolved from the target model's ``config.json``
  (``resolve_draft_config``), which a tokenizer directory does not have. DFlash reads only ``block_size`` from
  it here (``dflash_min_loss_tokens`` checks it is an integer >= 2 and returns 2).
- ``deployment`` is ``disaggregated`` with the ``mooncake`` backend and ``training.role: producer``: SpecForge's
  schema allows an online data source only so; nothing is started or connected.
- ``data.cache_dir`` is a temporary directory (SpecForge's default ``./cache`` would write into the working
  directory); ``data.build_dataset_num_proc`` is ``--num-proc`` (default 1; SpecForge's default is 8).

Output: one JSON line per row kept, ``{"input_ids": [...], "loss_mask": [...]}`` in the trainer's order
(SpecForge keeps no row id), to ``--out`` or stdout. Everything else the trainer prints goes to stderr.
A trainer exception prints its class and message on stderr, then one line ``@trainer-error {json}`` with
``type``, ``bases`` (the class's MRO names) and ``message``, and exits 3. ``--check`` imports the modules
used and prints the versions; ``--serve`` runs command lines read from stdin in one process (driver_io.py,
next to this file, says how).

Usage: python specforge_driver.py INPUT TOKENIZER_DIR MAX_LENGTH [--path tokenized|conversation]
       [--chat-template qwen3.5] [--train-only-last-turn] [--num-proc N] [--out FILE]
       python specforge_driver.py --check | --serve
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import driver_io  # tests/engines/driver_io.py: this script's directory is sys.path[0]

# Nothing else next to this script may shadow a package of the trainer's venv.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

DFLASH_DRAFT_CONFIG = {"block_size": 16}


def _import_trainer() -> None:
    import specforge.algorithms.builtin
    import specforge.data.preprocessing
    import specforge.data.prompt_builder
    import specforge.training.assembly  # noqa: F401


def _check() -> int:
    import importlib.metadata as md

    _import_trainer()
    names = ("specforge", "torch", "transformers", "tokenizers", "datasets")
    print(", ".join(f"{name} {md.version(name)}" for name in names))
    return 0


def _config(args: argparse.Namespace, scratch: str) -> Any:
    from specforge.config import Config

    data: dict[str, Any] = {
        "max_length": args.max_length,
        "chat_template": args.chat_template,
        "train_only_last_turn": args.train_only_last_turn,
        "cache_dir": os.path.join(scratch, "specforge-cache"),
        "build_dataset_num_proc": args.num_proc,
    }
    data["prompts_path" if args.path == "tokenized" else "train_data_path"] = args.input
    return Config.model_validate({
        "model": {"target_model_path": args.tokenizer_dir},
        "data": data,
        "training": {"strategy": "dflash", "role": "producer"},
        "deployment": {"mode": "disaggregated",
                       "disaggregated": {"control_dir": os.path.join(scratch, "control"), "backend": "mooncake"}},
    })


def _prepare(args: argparse.Namespace, scratch: str) -> list[dict[str, object]]:
    from specforge.algorithms.builtin import builtin_algorithm_registry
    from specforge.training import assembly

    cfg = _config(args, scratch)
    algorithm = builtin_algorithm_registry().resolve(cfg.training.strategy)
    tokenizer = assembly._load_text_tokenizer(cfg)
    prompts = assembly._prepare_prompts(cfg, tokenizer, algorithm=algorithm, draft_config=dict(DFLASH_DRAFT_CONFIG))
    rows: list[dict[str, object]] = []
    for prompt in prompts:
        payload = prompt["payload"]
        rows.append({"input_ids": [int(i) for i in payload["input_ids"]],
                     "loss_mask": [int(m) for m in payload["loss_mask"]]})
    return rows


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="specforge_driver.py", description=__doc__.splitlines()[0])
    parser.add_argument("input", help="the file the config names (data.prompts_path or data.train_data_path)")
    parser.add_argument("tokenizer_dir", help="model.target_model_path: a directory AutoTokenizer loads")
    parser.add_argument("max_length", type=int, help="data.max_length")
    parser.add_argument("--path", choices=("tokenized", "conversation"), default="tokenized",
                        help="the config key the file goes in: data.prompts_path (tokenized) or data.train_data_path")
    parser.add_argument("--chat-template", default="qwen3.5", help="data.chat_template (default qwen3.5)")
    parser.add_argument("--train-only-last-turn", action="store_true", help="data.train_only_last_turn: true")
    parser.add_argument("--num-proc", type=int, default=1, help="data.build_dataset_num_proc (default 1)")
    parser.add_argument("--out", help="write the rows here instead of stdout")
    return parser.parse_args(argv)


job = driver_io.rows_job(_prepare, _arguments)


def main(argv: list[str]) -> int:
    return driver_io.main(argv, job=job, check=_check, import_trainer=_import_trainer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
