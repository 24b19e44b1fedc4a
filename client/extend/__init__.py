"""`client.run --extend`: a finished run's replies that an old limit cut (`--train-window`, `--max-tokens`)
continued from their exact token ids under a larger one, into a new run; nothing else is generated again."""
