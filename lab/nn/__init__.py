"""The shared transformer core. Imports nothing else of lab."""
from lab.nn.attention import KVCache, MultiHeadAttention, causal_mask
from lab.nn.blocks import Block, Embeddings, SoftCap, TransformerStack, hidden_matrices, init_weights, make_block
from lab.nn.config import ConfigError, TransformerConfig

__all__ = [
    "Block",
    "ConfigError",
    "Embeddings",
    "KVCache",
    "MultiHeadAttention",
    "SoftCap",
    "TransformerConfig",
    "TransformerStack",
    "causal_mask",
    "hidden_matrices",
    "init_weights",
    "make_block",
]
