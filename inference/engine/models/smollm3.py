"""SmolLM3: Llama's layers with RoPE left out on every fourth one (NoPE), as the config's
`no_rope_layers` says (1: rotate, 0: not).

Everything else is Llama's: fused QKV and gate/up, the loaders, the linear formats; its GGUF files
(architecture `smollm3`) use Llama's tensor names and, like Llama's, interleave Q/K's rotary halves.
The fused C++ step rotates every layer, so SmolLM3 keeps the modules (FUSED_CPU_STEP).
"""

from __future__ import annotations

from .llama import LlamaForCausalLM


class SmolLM3ForCausalLM(LlamaForCausalLM):
    FUSED_CPU_STEP = False
    GGUF_ARCHITECTURES = ("smollm3",)

    def __init__(self, hf_config, max_positions: int):
        super().__init__(hf_config, max_positions)
        self.cfg.interleaved_rope_in_gguf = True  # llama.cpp converts SmolLM3 as a Llama
        interval = getattr(hf_config, "no_rope_layer_interval", 4)
        flags = getattr(hf_config, "no_rope_layers", None) or [int((i + 1) % interval != 0) for i in range(len(self.layers))]
        if getattr(hf_config, "use_sliding_window", False):
            raise ValueError("SmolLM3 with use_sliding_window is not supported (the published models do not use it)")
        for layer, rotates in zip(self.layers, flags):
            layer.self_attn.use_rope = bool(rotates)

    @property
    def attention_layout(self) -> str:
        nope = sum(not layer.self_attn.use_rope for layer in self.layers)
        return f"full attention, no RoPE on {nope} of {len(self.layers)} layers"
