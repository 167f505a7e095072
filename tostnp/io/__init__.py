"""Files: atomic writes (:mod:`.atomic`), training checkpoints (:mod:`.checkpoint`), a model
rebuilt from a checkpoint (:mod:`.loading`), the published models' format (:mod:`.interchange`).
"""
from .checkpoint import resolve_checkpoint
from .loading import load_model, read_model_checkpoint

__all__ = ["load_model", "read_model_checkpoint", "resolve_checkpoint"]
