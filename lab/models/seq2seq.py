"""Encoder-decoder transformer (Vaswani et al. 2017) built from the shared core."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lab.models.base import LabModel
from lab.nn import (
    Aux,
    Embeddings,
    KVCache,
    Role,
    Routing,
    TransformerConfig,
    TransformerStack,
    init_weights,
    parameter_roles,
)
from lab.nn.mup import output_multiplier, refuse_init_from


@dataclass
class EncoderDecoderConfig(TransformerConfig):
    """conf/model/seq2seq.yaml's schema: the architecture (n_layers per side) and the translator's own fields."""

    _target_: str = "lab.models.seq2seq.EncoderDecoder"
    share_embeddings: bool = True
    """One token embedding for both languages (a joint vocabulary); with tie_embeddings it is also the output
    projection (Press & Wolf 2017; "Attention Is All You Need" 3.4 shares all three)."""
    init_from: str | None = None
    """A Hugging Face model directory (MarianMTModel) whose weights the task loads before training."""

    def __post_init__(self) -> None:
        super().__post_init__()
        refuse_init_from(self, self.init_from)


class EncoderDecoder(LabModel):
    """Bidirectional encoder over the source; causal decoder with cross-attention to the encoder output.

    Source padding is masked in encoder self-attention and in every cross-attention. Target padding needs
    no mask: targets are right-padded, so causal attention never lets a real position see a pad, and the
    loss ignores pad positions.
    The keywords besides the data's ids are EncoderDecoderConfig's fields (arch: lab.nn.TransformerConfig's).
    """

    def __init__(self, vocab_size: int, pad_id: int, bos_id: int, eos_id: int, share_embeddings: bool = True,
                 init_from: str | None = None, **arch):
        super().__init__()
        self.cfg = cfg = TransformerConfig.from_kwargs(**arch)
        self.init_from = init_from
        self.vocab_size, self.pad_id, self.bos_id, self.eos_id = vocab_size, pad_id, bos_id, eos_id
        self.src_embed = Embeddings(vocab_size, cfg)
        self.tgt_embed = Embeddings(vocab_size, cfg)
        self.encoder = TransformerStack(cfg, causal=False)
        self.decoder = TransformerStack(cfg, causal=True, cross_attention=True)
        self.lm_head = nn.Linear(cfg.d_model, vocab_size, bias=False)
        self.output_scale = output_multiplier(cfg)  # T5's (model.output_scale), µP's for a tied head
        init_weights(self, cfg.init_std, cfg.n_layers, embed_std=cfg.embed_init_std)
        if share_embeddings:  # after init, so the names share one tensor
            self.tgt_embed.tokens.weight = self.src_embed.tokens.weight
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tgt_embed.tokens.weight
        self.apply_parametrization()

    def parameter_roles(self) -> dict[str, Role]:
        # tied: lm_head.weight is the (target, with share_embeddings also the source) token embedding's tensor,
        # listed once, as Role.EMBEDDING: initialised as the embedding, then shared
        return parameter_roles(self, readouts=(self.lm_head,))

    @property
    def max_seq_len(self) -> int:
        return self.cfg.max_seq_len

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src: [B, S] -> memory [B, S, D] and its padding mask [B, S] (True = real token)."""
        memory, src_mask, _ = self._encode(src)
        return memory, src_mask

    def _encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[int, Routing]]:
        src_mask = src != self.pad_id
        memory, routing = self.encoder(self.src_embed(src), padding_mask=src_mask)
        return memory, src_mask, routing

    def new_caches(self, batch: int, src_len: int, max_len: int | None = None) -> tuple[list[KVCache], list[KVCache]]:
        """Decoder self-attention caches (max_len target positions) and cross-attention caches, which hold
        each layer's projected memory once per source sentence."""
        return self.decoder.new_caches(batch, max_len), self.decoder.new_caches(batch, src_len)

    def decode(
        self,
        tgt: torch.Tensor,  # [B, T] target prefix, or its new tokens when caches are given
        memory: torch.Tensor,  # [B, S, D]
        src_mask: torch.Tensor,  # [B, S]
        caches: list[KVCache] | None = None,
        memory_caches: list[KVCache] | None = None,
    ) -> torch.Tensor:  # [B, T, V]
        return self._decode(tgt, memory, src_mask, caches, memory_caches)[0]

    def _decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor,
                caches: list[KVCache] | None = None, memory_caches: list[KVCache] | None = None,
                ) -> tuple[torch.Tensor, dict[int, Routing]]:
        start = caches[0].length if caches is not None else 0
        x, routing = self.decoder(self.tgt_embed(tgt, start), caches=caches, memory=memory,
                                  memory_padding_mask=src_mask, memory_caches=memory_caches)
        return self.lm_head(x if self.output_scale is None else x * self.output_scale), routing

    def forward(self, src: torch.Tensor, tgt: torch.Tensor,
                return_aux: bool = False) -> torch.Tensor | tuple[torch.Tensor, Aux]:
        """Teacher forcing: src [B, S], tgt [B, T] (bos + target, shifted right) -> logits [B, T, V] (and with
        return_aux the MoE layers' Aux)."""
        memory, src_mask, encoder_routing = self._encode(src)
        logits, decoder_routing = self._decode(tgt, memory, src_mask)
        return (logits, Aux.of(encoder=encoder_routing, decoder=decoder_routing)) if return_aux else logits
