"""Our own model implementations, keyed by the HF config's `model_type`."""

from ..errors import UnsupportedModelError
from .gemma3 import Gemma3ForCausalLM
from .gemma4 import Gemma4ForCausalLM
from .gpt2 import GPT2LMHeadModel
from .llama import LlamaForCausalLM
from .mixtral import MixtralForCausalLM
from .olmoe import OlmoeForCausalLM
from .phi3 import Phi3ForCausalLM
from .qwen3 import Qwen3ForCausalLM
from .qwen3_5 import Qwen35ForCausalLM
from .qwen3_5_moe import Qwen35MoeForCausalLM
from .qwen3_moe import Qwen3MoeForCausalLM
from .smollm3 import SmolLM3ForCausalLM

MODEL_CLASSES = {
    "llama": LlamaForCausalLM,
    "mistral": LlamaForCausalLM,
    "mixtral": MixtralForCausalLM,
    "olmoe": OlmoeForCausalLM,
    "phi3": Phi3ForCausalLM,
    "qwen2": LlamaForCausalLM,
    "qwen3": Qwen3ForCausalLM,
    "qwen3_moe": Qwen3MoeForCausalLM,
    "qwen3_5": Qwen35ForCausalLM,  # the text part of Qwen3_5ForConditionalGeneration
    "qwen3_5_text": Qwen35ForCausalLM,
    "qwen3_5_moe": Qwen35MoeForCausalLM,  # the text part of Qwen3_5MoeForConditionalGeneration
    "qwen3_5_moe_text": Qwen35MoeForCausalLM,
    "smollm3": SmolLM3ForCausalLM,
    "gemma3_text": Gemma3ForCausalLM,
    "gemma4": Gemma4ForCausalLM,  # the text part of Gemma4ForConditionalGeneration
    "gemma4_text": Gemma4ForCausalLM,
    "gpt2": GPT2LMHeadModel,
}


def model_class_for(hf_config):
    model_type = getattr(hf_config, "model_type", None)
    try:
        return MODEL_CLASSES[model_type]
    except KeyError:
        supported = ", ".join(sorted(MODEL_CLASSES))
        raise UnsupportedModelError(f"model type {model_type!r} is not supported; mini-vLLM implements: {supported}") from None
