"""Run speculators 0.9.0's own data preparation on a file and print the rows it keeps (runs in .venv-speculators).

This script owns one thing: driving the real data path of ``speculators prepare-data`` on the CPU and writing
what comes out. It imports the standard library and speculators (with the packages speculators imports),
never the project. The project side is tests/engines/trainers.py.

The call is ``speculators.data_generation.preprocessing.load_and_preprocess_dataset`` with the arguments
``speculators/cli/prepare_data.py`` ``prepare_data`` passes (``--model`` the tokenizer directory, one
``--data`` value, ``--seq-length``, ``--seed`` 0, ``--minimum-valid-tokens``, ``--max-samples``,
``build_dataset_num_proc=default_preprocessing_workers()``, ``skip_token_freq`` on, no ``--render-endpoint``).
Inside: ``load_processor`` (``AutoProcessor.from_pretrained``, which gives the tokenizer for a directory
without a processor config), ``load_raw_dataset`` (a local ``.json``/``.jsonl`` file, a directory of them,
``hf://datasets/...`` or ``hf:<id>``; a local ``.parquet`` file is refused, a folder of parquet files loads
only as ``hf:<folder>``), a shuffle with the seed, ``build_speculator_training_dataset``, whose
``_passthrough_pretokenized`` keeps rows with ``input_ids`` and ``loss_mask`` (cut to the window, dropped
without a supervised token or below the minimum), and a second shuffle. The command's last step,
``dataset.save_to_disk(--output)``, is left out: the rows are read from the dataset it returns.

Nothing is stubbed. Conversations without ids need a vLLM ``/render`` endpoint, which this does not start:
such a file fails as the command fails without ``--render-endpoint``.

Output: one JSON line per row kept, ``{"input_ids": [...], "loss_mask": [...], "seq_len": N}`` in the
dataset's order (speculators keeps no row id), to ``--out`` or stdout. Everything else the package prints
goes to stderr. A trainer exception prints its class and message on stderr, then one line
``@trainer-error {json}`` with ``type``, ``bases`` (the class's MRO names) and ``message``, and exits 3.
``--check`` imports the modules used and prints the versions; ``--serve`` runs command lines read from
stdin in one process (driver_io.py, next to this file, says how).

Usage: python speculators_driver.py INPUT TOKENIZER_DIR MAX_LENGTH [--minimum-valid-tokens N]
       [--max-samples N] [--seed 0] [--out FILE]
       python speculators_driver.py --check | --serve
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import driver_io  # tests/engines/driver_io.py: this script's directory is sys.path[0]

# Nothing else next to this script may shadow a package of the trainer's venv.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]


def _import_trainer() -> None:
    import speculators.data_generation.preprocessing  # noqa: F401


def _check() -> int:
    import importlib.metadata as md

    _import_trainer()
    names = ("speculators", "hs-connectors", "torch", "transformers", "tokenizers", "datasets")
    print(", ".join(f"{name} {md.version(name)}" for name in names))
    return 0


def _prepare(args: argparse.Namespace, scratch: str) -> list[dict[str, object]]:
    from speculators.data_generation.preprocessing import default_preprocessing_workers, load_and_preprocess_dataset

    dataset, _processor = load_and_preprocess_dataset(
        target_model_path=args.tokenizer_dir,
        train_data_paths=[args.input],
        seq_length=args.max_length,
        build_dataset_num_proc=default_preprocessing_workers(),
        seed=args.seed,
        max_samples=args.max_samples,
        token_freq_path=Path(scratch) / "output" / "token_freq.pt",
        render_endpoint=None,
        minimum_valid_tokens=args.minimum_valid_tokens,
        allow_empty_output=False,
        trust_remote_code=False,
        skip_token_freq=True,
    )
    rows: list[dict[str, object]] = []
    for record in dataset:  # set_format("torch"): tensors
        rows.append({"input_ids": [int(i) for i in record["input_ids"].tolist()],
                     "loss_mask": [int(m) for m in record["loss_mask"].tolist()],
                     "seq_len": int(record["seq_len"])})
    return rows


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="speculators_driver.py", description=__doc__.splitlines()[0])
    parser.add_argument("input", help="one --data value: a .json/.jsonl file, a folder of them, or hf:<id or folder>")
    parser.add_argument("tokenizer_dir", help="--model: a directory AutoProcessor loads")
    parser.add_argument("max_length", type=int, help="--seq-length")
    parser.add_argument("--minimum-valid-tokens", type=int, default=None, help="--minimum-valid-tokens")
    parser.add_argument("--max-samples", type=int, default=None, help="--max-samples")
    parser.add_argument("--seed", type=int, default=0, help="--seed (default 0)")
    parser.add_argument("--out", help="write the rows here instead of stdout")
    return parser.parse_args(argv)


job = driver_io.rows_job(_prepare, _arguments)


def main(argv: list[str]) -> int:
    return driver_io.main(argv, job=job, check=_check, import_trainer=_import_trainer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
