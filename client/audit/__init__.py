"""`python -m client.audit`: is this data real? Reads a run's results, reports, and gives a verdict."""
