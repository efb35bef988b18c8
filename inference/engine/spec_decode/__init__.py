"""Speculative decoding: the n-gram proposer and its policy, the n-gram index, and verification of the guessed tokens in the decode step."""
