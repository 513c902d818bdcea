"""The shared transformer core. Imports nothing of lab but lab.errors."""
from lab.nn.attention import KVCache, MultiHeadAttention, causal_mask
from lab.nn.blocks import Block, Embeddings, SoftCap, TransformerStack, init_weights, make_block, parameter_roles
from lab.nn.config import TransformerConfig
from lab.nn.roles import Role
from lab.nn.routing import Aux, Routing

__all__ = [
    "Aux",
    "Block",
    "Embeddings",
    "KVCache",
    "MultiHeadAttention",
    "Role",
    "Routing",
    "SoftCap",
    "TransformerConfig",
    "TransformerStack",
    "causal_mask",
    "init_weights",
    "make_block",
    "parameter_roles",
]
