"""`python -m client.run`: the main job's command line, config, console, metrics, summary and S3 wiring; the
engine it drives is client.engine.
"""
