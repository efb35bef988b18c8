"""GGUF files read in place: the config and tokenizer from metadata (cached), the tensor index, blocks kept as they lie for our kernels, de-quantized by torch on CUDA, and the packed-weight cache."""
