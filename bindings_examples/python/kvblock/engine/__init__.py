"""A mini serving engine on libkvblock (continuous batching): a numpy fp32 Llama-style model with random
weights (`python -m kvblock.engine --requests 64 --shared-prefix 512`), or, with torch, a Hugging Face Llama /
Qwen2 / Mistral checkpoint on a GPU or the CPU (`python -m kvblock.engine --model DIR --text "..."`; the
torch modules are torch_model, runner, torch_engine and checkpoint, imported on demand)."""
from .engine import Engine, EngineConfig, Metrics
from .model import Model, ModelConfig, reference_generate, sample
from .sequence import Request, Seq

__all__ = ["Engine", "EngineConfig", "Metrics", "Model", "ModelConfig", "Request", "Seq", "reference_generate",
           "sample"]
