"""Real inference engines (vLLM on the CPU) and the tiny models they serve, for the tests."""
