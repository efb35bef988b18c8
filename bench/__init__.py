"""Serving benchmark and HF `generate` baselines for mini-vLLM (tools, never imported by the product)."""
