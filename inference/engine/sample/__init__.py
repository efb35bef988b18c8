"""Choosing the next token: the batched sampler, per-request sampling parameters, grammars and JSON schemas (structured outputs), the reasoning phase and a checkpoint's own sampling defaults."""
