"""`python -m client.run`: the main job. CLI, swarm, retry policy, turns, console, summary and the S3 wiring of a
run.
"""
