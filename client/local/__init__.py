"""Local disk: prompt files in (validated, sharded, done ids skipped), result segments and failures out, the done-
id ledger.
"""
