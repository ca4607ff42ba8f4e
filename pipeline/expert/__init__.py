"""Expert guidance: the curated knowledge the agents' prompts draw from (knowledge/), and the expert backend that
needs no model (backend.py: capture -> IR -> exact rewrites -> fusion -> Triton templates; docs/expert.md)."""
