"""egg's language-model layer.

spec (PROVIDER:MODEL[@BASE_URL]) -> provider (one SDK call, typed failures) -> transport (retries, concurrency,
every attempt) -> cassette (record/replay) -> client (labels, CallRecord per call) -> structured (typed replies).
Start with `pipeline.llm.client.open_client(load_config().llm)`; tests use `pipeline.llm.scripted.scripted_client`.
"""
