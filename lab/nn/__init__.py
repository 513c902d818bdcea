"""The shared transformer core. Imports nothing else of lab."""
from lab.nn.attention import KVCache, MultiHeadAttention, causal_mask
from lab.nn.blocks import Block, Embeddings, TransformerStack, init_weights, make_block
from lab.nn.config import ConfigError, TransformerConfig

__all__ = [
    "Block",
    "ConfigError",
    "Embeddings",
    "KVCache",
    "MultiHeadAttention",
    "TransformerConfig",
    "TransformerStack",
    "causal_mask",
    "init_weights",
    "make_block",
]
