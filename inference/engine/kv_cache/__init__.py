"""Every kind of per-sequence memory the engine keeps, one manager per kind behind one coordinator
(coordinator.py), as vLLM's per-type KV cache managers and llama.cpp's hybrid memory are:
full-attention blocks (full_attention.py) and sliding-window blocks (sliding_window.py), kept the
same way (block_pool.py), and a hybrid model's recurrent state slots and prefix checkpoints
(recurrent_state.py); which layer keeps which (layout.py), how much of each fits (memory_plan.py)
and the tensors (tensors.py)."""
