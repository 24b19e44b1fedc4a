"""The engine of a run, apart from any command line: the swarm (one TaskGroup, a worker pool sized by the
fleet), the retry policy by error class, the request rate, multi-turn conversations and their ledger, and
the rows written. `client.run` drives it for `python -m client.run`; `client.estimate`'s calibration
drives it too."""
