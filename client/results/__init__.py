"""The offline side's one reader of a run's results (local or S3), and the per-record judgements the offline tools
share.
"""
