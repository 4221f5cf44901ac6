"""A mini serving engine on libkvblock (numpy fp32 Llama-style model, continuous batching). Demo:
`python -m kvblock.engine --requests 64 --shared-prefix 512`."""
from .engine import Engine, EngineConfig, Metrics
from .model import Model, ModelConfig, reference_generate, sample
from .sequence import Request, Seq

__all__ = ["Engine", "EngineConfig", "Metrics", "Model", "ModelConfig", "Request", "Seq", "reference_generate",
           "sample"]
