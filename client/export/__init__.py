"""`python -m client.export`: results -> the tokenized training set the drafter pipeline reads."""
