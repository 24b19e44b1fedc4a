"""`python -m client.status`: how far a run is, across every shard from S3, or from one local --out."""
