"""GPT: a decoder-only language model built from the shared core."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lab.errors import ConfigError
from lab.models.base import LabModel
from lab.nn import (
    Aux,
    Embeddings,
    KVCache,
    Role,
    SoftCap,
    TransformerConfig,
    TransformerStack,
    init_weights,
    parameter_roles,
)
from lab.nn.mup import output_multiplier, refuse_init_from


@dataclass
class GPTConfig(TransformerConfig):
    """conf/model/gpt.yaml's schema: the architecture and GPT's own fields (GPT's keyword arguments)."""

    _target_: str = "lab.models.gpt.GPT"
    init_from: str | None = None
    """A Hugging Face model directory (GPT-2, Llama, Mixtral, Mistral, Qwen3, Apertus) whose weights the task loads
    before training (stored on the model so the run's config records where the weights came from)."""
    logit_softcap: float | None = None
    """Logits -> cap * tanh(logits / cap) (lab.nn.SoftCap; e.g. 30); None: raw logits."""
    zero_init_proj: bool = False
    """The residual output projections, and the head when untied, start at zero (modded-nanogpt): the model starts
    as a uniform predictor whose blocks are identities."""

    def __post_init__(self) -> None:
        super().__post_init__()
        refuse_init_from(self, self.init_from)
        if self.logit_softcap is not None and not self.logit_softcap > 0:
            raise ConfigError(f"model.logit_softcap={self.logit_softcap!r} must be a number in (0, inf) or null")


class GPT(LabModel):
    """Token + position embedding -> causal transformer stack -> linear head over the vocabulary
    (-> optional logit soft-cap)."""

    def __init__(self, vocab_size: int, init_from: str | None = None, logit_softcap: float | None = None,
                 zero_init_proj: bool = False, **arch):
        """The keywords are GPTConfig's fields (arch: lab.nn.TransformerConfig's)."""
        super().__init__()
        self.cfg = cfg = TransformerConfig.from_kwargs(**arch)
        self.vocab_size, self.init_from = vocab_size, init_from
        self.embed = Embeddings(vocab_size, cfg)
        self.decoder = TransformerStack(cfg, causal=True)
        self.lm_head = nn.Linear(cfg.d_model, vocab_size, bias=False)
        self.softcap = SoftCap(logit_softcap) if logit_softcap is not None else None
        self.output_scale = output_multiplier(cfg)
        init_weights(self, cfg.init_std, cfg.n_layers, zero_init_proj=zero_init_proj, embed_std=cfg.embed_init_std)
        if cfg.tie_embeddings:  # after init, so both names share one tensor
            self.lm_head.weight = self.embed.tokens.weight
        elif zero_init_proj:
            nn.init.zeros_(self.lm_head.weight)
        self.apply_parametrization()

    def parameter_roles(self) -> dict[str, Role]:
        # tied: lm_head.weight is the token embedding's tensor, listed once, as Role.EMBEDDING: it is initialised
        # as the embedding (init_weights, then shared), and its lookup rows are what it trains first
        return parameter_roles(self, readouts=(self.lm_head,))

    @property
    def max_seq_len(self) -> int:
        return self.cfg.max_seq_len

    def new_caches(self, batch: int) -> list[KVCache]:
        return self.decoder.new_caches(batch)

    def forward(self, ids: torch.Tensor, caches: list[KVCache] | None = None,
                return_aux: bool = False) -> torch.Tensor | tuple[torch.Tensor, Aux]:
        """ids: [B, T] -> logits [B, T, V] (and with return_aux the MoE layers' Aux). With caches, ids continue
        the cached sequence."""
        start = caches[0].length if caches is not None else 0
        h, routing = self.decoder(self.embed(ids, start), caches=caches)  # [B, T, D]
        logits = self.lm_head(h if self.output_scale is None else h * self.output_scale)
        logits = logits if self.softcap is None else self.softcap(logits)
        return (logits, Aux.of(decoder=routing)) if return_aux else logits
