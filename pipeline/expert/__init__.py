"""Expert guidance: the curated knowledge the agents' prompts draw from (and, later, the no-LLM backend)."""
