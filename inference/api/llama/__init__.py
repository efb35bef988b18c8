"""llama.cpp server's own endpoints: fill-in-the-middle (/infill), /tokenize, /detokenize, /tokenizer_info."""
