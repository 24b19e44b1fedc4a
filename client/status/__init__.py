"""`python -m client.status`: the totals of a run across every shard and host, read from S3."""
