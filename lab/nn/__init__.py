"""The shared transformer core. Imports nothing else of lab."""
from lab.nn.attention import KVCache, MultiHeadAttention, causal_mask
from lab.nn.blocks import Block, Embeddings, SoftCap, TransformerStack, init_weights, make_block, parameter_roles
from lab.nn.config import ConfigError, TransformerConfig
from lab.nn.roles import Role
from lab.nn.routing import Aux, Routing

__all__ = [
    "Aux",
    "Block",
    "ConfigError",
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
