"""regen-swarm prompts: the PromptRecord format, a sample set, and converters from other dataset shapes."""
