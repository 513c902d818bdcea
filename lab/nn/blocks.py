"""Residual blocks, stacks of them, and the token+position embedding that feeds a stack."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lab.errors import ConfigError
from lab.nn import mup
from lab.nn.attention import KVCache, MultiHeadAttention, causal_mask
from lab.nn.config import TransformerConfig
from lab.nn.ffn import make_ffn
from lab.nn.norms import RMSNorm, make_norm
from lab.nn.positions import LearnedPositions, RelativePositionBias, RotaryEmbedding, make_absolute_positions
from lab.nn.roles import ResidualProjection, Role
from lab.nn.routing import RoutedFFN, Routing, StackedExperts


class Block(nn.Module):
    """Self-attention, optional cross-attention, feed-forward; each a residual sublayer.

    pre-norm:  x + f(norm(x))   (GPT-2; stable without warmup tricks, needs a final norm)
    post-norm: norm(x + f(x))   (Vaswani et al.)
    The block receives its parts (by keyword); it never decides what kind they are. A RoutedFFN's record of
    its forward is returned beside the output.
    """

    def __init__(
        self,
        *,
        self_attn: MultiHeadAttention,
        ffn: nn.Module,
        norms: list[nn.Module],
        pre_norm: bool,
        dropout: float = 0.0,
        cross_attn: MultiHeadAttention | None = None,
    ):
        super().__init__()
        self.self_attn, self.cross_attn, self.ffn = self_attn, cross_attn, ffn
        self.norm_attn = norms[0]
        self.norm_cross = norms[1] if cross_attn is not None else None
        self.norm_ffn = norms[-1]
        self.pre_norm = pre_norm
        self.dropout = dropout

    def _residual(self, x: torch.Tensor, norm: nn.Module, f, **kwargs) -> torch.Tensor:
        return self._add(x, norm, f(norm(x) if self.pre_norm else x, **kwargs))

    def _add(self, x: torch.Tensor, norm: nn.Module, y: torch.Tensor) -> torch.Tensor:
        if self.dropout and self.training:  # a plain branch: decoding is per-call overhead bound
            y = F.dropout(y, self.dropout)
        return x + y if self.pre_norm else norm(x + y)

    def forward(
        self,
        x: torch.Tensor,  # [B, T, D]
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        memory: torch.Tensor | None = None,  # [B, S, D]
        memory_mask: torch.Tensor | None = None,
        memory_cache: KVCache | None = None,
        token_mask: torch.Tensor | None = None,  # [B, T] True on real tokens: MoE routes only those
    ) -> tuple[torch.Tensor, Routing | None]:
        """-> the block's output [B, T, D] and, for a RoutedFFN, its record of this forward (else None)."""
        x = self._residual(x, self.norm_attn, self.self_attn, mask=mask, is_causal=is_causal, cache=cache)
        if self.cross_attn is not None:
            x = self._residual(x, self.norm_cross, self.cross_attn, memory=memory, mask=memory_mask, cache=memory_cache)
        h = self.norm_ffn(x) if self.pre_norm else x
        if isinstance(self.ffn, RoutedFFN):
            y, routing = self.ffn(h, token_mask=token_mask)
            return self._add(x, self.norm_ffn, y), routing
        return self._add(x, self.norm_ffn, self.ffn(h)), None


def make_feed_forward(cfg: TransformerConfig, layer: int = 0, causal: bool = True) -> nn.Module:
    """The dense FFN, or a mixture of experts when cfg.moe is set and covers this layer (moe.every_n).
    causal: whether the stack is a decoder (True unless the caller says otherwise: expert-choice routing is
    refused there)."""
    if cfg.moe:
        from lab.nn.moe import make_moe  # noqa: PLC0415 - only MoE models pay for it

        if cfg.moe.applies_to(layer):
            return make_moe(cfg, causal)
    return make_ffn(cfg.ffn, cfg.d_model, cfg.d_ff, cfg.bias, cfg.dropout)


def make_block(
    cfg: TransformerConfig, rotary: RotaryEmbedding | None, cross_attention: bool, layer: int = 0, causal: bool = True
) -> Block:
    def attn(cross: bool) -> MultiHeadAttention:
        eps = cfg.norm_eps if cfg.norm == "rmsnorm" else 1e-6  # the block norms' (Qwen3's rms_norm_eps for both)
        qk_norm = (RMSNorm(cfg.head_dim, eps), RMSNorm(cfg.head_dim, eps)) if cfg.qk_norm else None
        return MultiHeadAttention(cfg.d_model, cfg.n_heads, bias=cfg.bias, dropout=cfg.dropout, rotary=rotary,
                                  cross=cross, qk_norm=qk_norm, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                                  scale=mup.attention_scale(cfg))

    n_sublayers = 3 if cross_attention else 2
    return Block(
        self_attn=attn(False),
        ffn=make_feed_forward(cfg, layer, causal),
        norms=[make_norm(cfg.norm, cfg.d_model, cfg.bias, cfg.norm_eps) for _ in range(n_sublayers)],
        pre_norm=cfg.norm_placement == "pre",
        dropout=cfg.dropout,
        cross_attn=attn(True) if cross_attention else None,
    )


class TransformerStack(nn.Module):
    """n blocks and, for pre-norm, the final norm. causal=True for decoders; cross_attention for seq2seq."""

    def __init__(self, cfg: TransformerConfig, causal: bool, cross_attention: bool = False):
        super().__init__()
        self.cfg, self.causal = cfg, causal
        rotary = (RotaryEmbedding(cfg.head_dim, cfg.max_seq_len, cfg.rope_base, cfg.rope_scaling)
                  if cfg.positions == "rotary" else None)
        self.relative = (RelativePositionBias(cfg.n_heads, cfg.relative_buckets, cfg.relative_max_distance, not causal)
                         if cfg.positions == "relative" else None)
        self.layers = nn.ModuleList(make_block(cfg, rotary, cross_attention, i, causal) for i in range(cfg.n_layers))
        pre = cfg.norm_placement == "pre"
        self.final_norm = make_norm(cfg.norm, cfg.d_model, cfg.bias, cfg.norm_eps) if pre else nn.Identity()

    def new_caches(self, batch: int, max_len: int | None = None, like: torch.Tensor | None = None) -> list[KVCache]:
        """One self-attention cache per layer, sized for max_len positions (default: the context window)."""
        p = next(self.parameters()) if like is None else like
        max_len = max_len or self.cfg.max_seq_len
        return [KVCache(batch, self.cfg.n_kv_heads, self.cfg.head_dim, max_len, p.dtype, p.device) for _ in self.layers]

    def forward(
        self,
        x: torch.Tensor,  # [B, T, D]
        padding_mask: torch.Tensor | None = None,  # [B, T or cached length], True = real token
        caches: list[KVCache] | None = None,
        memory: torch.Tensor | None = None,  # [B, S, D]
        memory_padding_mask: torch.Tensor | None = None,  # [B, S]
        memory_caches: list[KVCache] | None = None,
    ) -> tuple[torch.Tensor, dict[int, Routing]]:
        """-> the final hidden states [B, T, D] and the records of the routed layers, by layer index."""
        mask = padding_mask[:, None, None, :] if padding_mask is not None else None
        memory_mask = memory_padding_mask[:, None, None, :] if memory_padding_mask is not None else None
        # the current tokens' own padding (the last T positions when a cache holds earlier ones)
        token_mask = padding_mask[:, -x.shape[1]:] if padding_mask is not None else None
        is_causal = self.causal
        if self.relative is not None:  # one additive mask for every layer: the bias, -inf where not allowed
            T, start = x.shape[1], caches[0].length if caches is not None else 0
            allowed = causal_mask(T, start + T, x.device) if self.causal else None
            if mask is not None:
                allowed = mask if allowed is None else mask & allowed
            mask, is_causal = self.relative(T, start, allowed), False
        routing = {}
        for i, layer in enumerate(self.layers):
            x, routing[i] = layer(
                x,
                mask=mask,
                is_causal=is_causal,
                cache=caches[i] if caches is not None else None,
                memory=memory,
                memory_mask=memory_mask,
                memory_cache=memory_caches[i] if memory_caches is not None else None,
                token_mask=token_mask,
            )
        return self.final_norm(x), {i: r for i, r in routing.items() if r is not None}


class Embeddings(nn.Module):
    """Token embedding (optionally scaled by sqrt(d)) plus absolute positions, optionally normalised, then dropout."""

    def __init__(self, vocab_size: int, cfg: TransformerConfig):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.d_model)
        self.positions = make_absolute_positions(cfg.positions, cfg.max_seq_len, cfg.d_model)
        self.scale = mup.embedding_scale(cfg)
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.bias, cfg.norm_eps) if cfg.embed_norm else None
        self.max_len = cfg.max_seq_len
        self.dropout = cfg.dropout

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:  # [B, T] -> [B, T, D]
        T = ids.shape[1]
        if start + T > self.max_len:
            raise ConfigError(
                f"sequence of {start + T} tokens is longer than model.max_seq_len={self.max_len}; "
                "raise model.max_seq_len or shorten the input"
            )
        x = self.tokens(ids)
        if self.scale != 1.0:
            x = x * self.scale
        if self.positions is not None:
            x = x + self.positions(start, T)
        if self.norm is not None:
            x = self.norm(x)
        return F.dropout(x, self.dropout) if self.dropout and self.training else x


def parameter_roles(model: nn.Module, readouts: tuple[nn.Module, ...]) -> dict[str, Role]:
    """Every parameter of `model` (by its first name: a tied tensor is listed once) -> its Role, by the kind of
    lab.nn module that holds it; the model names its output layers (`readouts`), whose matrices are
    Role.READOUT unless tied (then the embedding's tensor, listed under the embedding's name). 1-D parameters
    are Role.VECTOR wherever they are; a matrix no rule covers is an error, so a new module type is given its
    role here rather than a silent default."""
    matrix_roles: dict[int, Role] = {}
    for m in model.modules():  # outer modules first: a Block's or a head's rule is set before its inner layers'
        if isinstance(m, Block):
            matrix_roles.update({id(lin.weight): Role.HIDDEN for lin in m.modules() if isinstance(lin, nn.Linear)})
        elif isinstance(m, nn.Embedding | LearnedPositions | RelativePositionBias):
            matrix_roles.update({id(p): Role.EMBEDDING for p in m.parameters()})
        elif isinstance(m, nn.Linear) and id(m.weight) not in matrix_roles:
            matrix_roles[id(m.weight)] = Role.READOUT if any(m is r for r in readouts) else Role.HEAD
        if isinstance(m, RoutedFFN):
            matrix_roles[id(m.router.weight)] = Role.ROUTER
        if isinstance(m, StackedExperts):  # stacked biases are 2-D only because stacked: still vectors
            matrix_roles.update({id(p): Role.EXPERT if p.dim() == 3 else Role.VECTOR for p in m.parameters()})
    roles = {}
    for name, p in model.named_parameters():
        if p.dim() < 2:
            roles[name] = Role.VECTOR
        elif id(p) in matrix_roles:
            roles[name] = matrix_roles[id(p)]
        else:
            raise TypeError(f"parameter {name} {tuple(p.shape)} has no role: give its module type one in "
                            "lab.nn.blocks.parameter_roles")
    return roles


class SoftCap(nn.Module):
    """cap * tanh(x / cap) (Gemma 2; modded-nanogpt's logits): smooth, ~identity for |x| << cap, bounded by cap,
    so no logit can run away early in training."""

    def __init__(self, cap: float):
        super().__init__()
        if not cap > 0:
            raise ConfigError(f"logit soft-cap must be positive, got {cap}; set model.logit_softcap=null to turn it off")
        self.cap = float(cap)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cap * torch.tanh(x / self.cap)

    def extra_repr(self) -> str:
        return f"cap={self.cap}"


def init_weights(module: nn.Module, std: float, n_residual_layers: int, zero_init_proj: bool = False,
                 embed_std: float | None = None) -> None:
    """GPT-2 init: N(0, std) everywhere, residual output projections (ResidualProjection, the experts' output
    matrices) N(0, std/sqrt(2L)) so the residual stream's variance does not grow with depth; zero biases.
    zero_init_proj (model.zero_init_proj): those projections start at
    zero instead (modded-nanogpt), so every block starts as the identity and learns its way in. embed_std: the
    token embeddings' std (T5: 1.0); None: std."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            residual = isinstance(m, ResidualProjection)
            scale = math.sqrt(2 * n_residual_layers) if residual else 1.0
            nn.init.normal_(m.weight, mean=0.0, std=0.0 if residual and zero_init_proj else std / scale)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=std if embed_std is None else embed_std)
        elif isinstance(m, (LearnedPositions, RelativePositionBias)):
            nn.init.normal_(m.weight, mean=0.0, std=std)
        elif isinstance(m, StackedExperts):  # raw stacked weights (MoE experts) follow the same rule
            m.init_parameters(std, 0.0 if zero_init_proj else std / math.sqrt(2 * n_residual_layers))
