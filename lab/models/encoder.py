"""Bidirectional encoders from the shared core: a backbone, a classifier on top (sequence or token labels)
and a masked language model (BERT, Devlin et al. 2019) whose output layer is tied to the embeddings."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lab.errors import ConfigError, LabError
from lab.models.base import LabModel
from lab.nn import (
    Aux,
    Embeddings,
    Role,
    Routing,
    TransformerConfig,
    TransformerStack,
    init_weights,
    parameter_roles,
)
from lab.nn.mup import output_multiplier, refuse_init_from

log = logging.getLogger("lab")


class Encoder(nn.Module):
    """Embeddings -> non-causal stack: every token attends to every real (non-padding) token."""

    def __init__(self, vocab_size: int, pad_id: int, cfg: TransformerConfig):
        super().__init__()
        if cfg.output_scale:  # the classifier's and the MLM head's inputs are not T5's decoder output
            raise ConfigError("model.output_scale is T5's scale before a language model's output projection (GPT, the "
                              "translator); the encoders do not have it: set model.output_scale=false")
        self.pad_id = pad_id
        self.embed = Embeddings(vocab_size, cfg)
        self.stack = TransformerStack(cfg, causal=False)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[int, Routing]]:
        """ids [B, T] -> hidden states [B, T, D], the padding mask [B, T] (True = real token) and the routed
        layers' records by layer index."""
        mask = ids != self.pad_id
        h, routing = self.stack(self.embed(ids), padding_mask=mask)
        return h, mask, routing


class ClsPooling(nn.Module):
    """The first ([CLS]) position's state."""

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, D]
        return h[:, 0]


class BertPooling(nn.Module):
    """BERT's pooler: the [CLS] state through a dense layer and tanh."""

    def __init__(self, d_model: int):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, D]
        return torch.tanh(self.dense(h[:, 0]))


class MeanPooling(nn.Module):
    """Average over real tokens only: padding contributes nothing."""

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(h.dtype)  # [B, T, 1]
        return (h * m).sum(1) / m.sum(1).clamp(min=1.0)


class AttentionPooling(nn.Module):
    """A learned query attends over the real tokens (softmax(h q / sqrt(D)) weighted sum)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(d_model))  # zero: starts as mean pooling

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = (h @ self.query) / math.sqrt(h.shape[-1])  # [B, T]
        weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        return torch.einsum("bt,btd->bd", weights, h)


POOLINGS = {"cls": lambda d: ClsPooling(), "bert": BertPooling, "mean": lambda d: MeanPooling(), "attention": AttentionPooling}
HEADS = ("sequence", "token")


@dataclass
class EncoderClassifierConfig(TransformerConfig):
    """conf/model/encoder_classifier.yaml's schema: the architecture and the classifier's own fields."""

    _target_: str = "lab.models.encoder.EncoderClassifier"
    pooling: str = "cls"
    """cls | bert (the [CLS] state -> dense -> tanh) | mean | attention; head=sequence only."""
    head: str = "sequence"
    """sequence (one label per input) | token (one label per token, tagging)."""
    classifier_dropout: float = 0.1
    """Dropout on the pooled (or per-token) state before the classifier."""
    init_from: str | None = None
    """A MaskedLM checkpoint whose encoder weights the task loads before training (EncoderClassifier.load_encoder),
    or a Hugging Face BERT directory (stored on the model so the run's config records where the weights came from)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        refuse_init_from(self, self.init_from)
        if not 0.0 <= self.classifier_dropout < 1.0:
            raise ConfigError(f"model.classifier_dropout={self.classifier_dropout!r} must be a probability in [0, 1)")


@dataclass
class MaskedLMConfig(TransformerConfig):
    """conf/model/encoder_mlm.yaml's schema: the architecture only."""

    _target_: str = "lab.models.encoder.MaskedLM"
    init_from: str | None = None
    """A Hugging Face BertForMaskedLM directory whose weights the task loads before training (continued
    pretraining; stored on the model so the run's config records where the weights came from)."""


class EncoderClassifier(LabModel):
    """Encoder -> pooling -> dropout -> linear: one label per sequence (head=sequence, logits [B, C]), or
    encoder -> dropout -> linear per token (head=token, logits [B, T, C]) for tagging.
    The keywords besides the data's facts are EncoderClassifierConfig's fields (arch: lab.nn.TransformerConfig's)."""

    def __init__(self, vocab_size: int, pad_id: int, num_labels: int, pooling: str = "cls", head: str = "sequence",
                 classifier_dropout: float = 0.1, init_from: str | None = None, **arch):
        super().__init__()
        if pooling not in POOLINGS:
            raise ConfigError(f"model.pooling={pooling!r} is not supported; choose one of {', '.join(POOLINGS)}")
        if head not in HEADS:
            raise ConfigError(f"model.head={head!r} is not supported; choose one of {', '.join(HEADS)}")
        self.cfg = cfg = TransformerConfig.from_kwargs(**arch)
        self.head_kind, self.init_from = head, init_from
        self.encoder = Encoder(vocab_size, pad_id, cfg)
        self.pool = POOLINGS[pooling](cfg.d_model) if head == "sequence" else None
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(cfg.d_model, num_labels)
        init_weights(self, cfg.init_std, cfg.n_layers, embed_std=cfg.embed_init_std)
        self.apply_parametrization()

    def parameter_roles(self) -> dict[str, Role]:
        return parameter_roles(self, readouts=(self.classifier,))  # a pooler's dense layer is Role.HEAD

    def forward(self, ids: torch.Tensor, return_aux: bool = False) -> torch.Tensor | tuple[torch.Tensor, Aux]:
        """ids [B, T] -> logits [B, C] or [B, T, C] (and with return_aux the MoE layers' Aux)."""
        h, mask, routing = self.encoder(ids)  # [B, T, D], [B, T]
        if self.pool is not None:
            h = self.pool(h, mask)  # [B, D]
        logits = self.classifier(self.dropout(h))
        return (logits, Aux.of(**{"encoder.stack": routing})) if return_aux else logits

    def load_encoder(self, state: dict[str, torch.Tensor], source: str = "checkpoint") -> dict[str, list[str]]:
        """Copy the `encoder.*` weights of a model state dict (a MaskedLM's) into this model's encoder.
        -> {"loaded": keys copied, "new": keys of this model left at their init, "ignored": keys not used}.
        Refuses, before changing anything, when a key is missing or a shape differs."""
        own = self.state_dict()
        wanted = [k for k in own if k.startswith("encoder.")]
        missing = [k for k in wanted if k not in state]
        bad = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
               for k in wanted if k in state and state[k].shape != own[k].shape]
        if missing or bad:
            raise LabError(
                f"model.init_from={source} does not fit this encoder: "
                + (f"missing {len(missing)} encoder key(s) (e.g. {missing[:3]}); " if missing else "")
                + (f"shape mismatch in {'; '.join(bad[:4])}; " if bad else "")
                + "use the same model size (d_model, n_layers, n_heads, d_ff, max_seq_len) and the pretraining "
                "run's tokenizer (data.tokenizer_from=<mlm ckpt>)"
            )
        with torch.no_grad():
            for k in wanted:
                own[k].copy_(state[k])
        report = {"loaded": wanted, "new": [k for k in own if k not in wanted],
                  "ignored": sorted(k for k in state if k not in wanted)}
        log.info("init_from %s: loaded %d encoder tensors; new (trained from init): %s; ignored: %s", source,
                 len(report["loaded"]), ", ".join(report["new"]) or "-", ", ".join(report["ignored"]) or "-")
        return report


class MLMHead(nn.Module):
    """BERT's prediction head: dense -> gelu -> layernorm -> vocabulary projection (weight given: tied).
    exact_gelu: the erf GELU instead of the tanh approximation; eps: the layernorm's epsilon."""

    def __init__(self, d_model: int, vocab_size: int, exact_gelu: bool = False, eps: float = 1e-5,
                 output_scale: float | None = None):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.approximate = "none" if exact_gelu else "tanh"
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.decoder = nn.Linear(d_model, vocab_size)
        self.output_scale = output_scale  # µP's multiplier for a tied decoder (lab.nn.mup.output_multiplier)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [..., D] -> [..., V]
        h = self.norm(F.gelu(self.dense(h), approximate=self.approximate))
        return self.decoder(h if self.output_scale is None else h * self.output_scale)

    @classmethod
    def for_model(cls, cfg: TransformerConfig, vocab_size: int) -> MLMHead:
        """BERT's head has the FFN's activation and the model's layer norm epsilon (one hidden_act, one
        layer_norm_eps): the exact GELU when model.ffn=gelu_erf, the tanh one for every other FFN (what lab's
        head always computed); model.norm_eps for a layernorm model, PyTorch's 1e-5 under rmsnorm (the head is a
        LayerNorm whatever the blocks use, and kept that epsilon). The shipped encoder_mlm (gelu, layernorm,
        norm_eps null = 1e-5) gets the head it always had."""
        eps = cfg.norm_eps if cfg.norm == "layernorm" else 1e-5
        return cls(cfg.d_model, vocab_size, exact_gelu=cfg.ffn == "gelu_erf", eps=eps, output_scale=output_multiplier(cfg))


class MaskedLM(LabModel):
    """Encoder + MLM head; the head's output matrix is the token embedding when tie_embeddings (default)."""

    def __init__(self, vocab_size: int, pad_id: int, mask_id: int, init_from: str | None = None, **arch):
        super().__init__()
        self.cfg = cfg = TransformerConfig.from_kwargs(**arch)
        self.mask_id, self.init_from = mask_id, init_from
        self.encoder = Encoder(vocab_size, pad_id, cfg)
        self.mlm_head = MLMHead.for_model(cfg, vocab_size)
        init_weights(self, cfg.init_std, cfg.n_layers, embed_std=cfg.embed_init_std)
        if cfg.tie_embeddings:  # after init, so both names share one tensor
            self.mlm_head.decoder.weight = self.encoder.embed.tokens.weight
        self.apply_parametrization()

    def parameter_roles(self) -> dict[str, Role]:
        # tied: mlm_head.decoder.weight is the token embedding's tensor, listed once, as Role.EMBEDDING: initialised
        # as the embedding, then shared; the head's dense transform is Role.HEAD
        return parameter_roles(self, readouts=(self.mlm_head.decoder,))

    def forward(self, ids: torch.Tensor, select: torch.Tensor | None = None,
                return_aux: bool = False) -> torch.Tensor | tuple[torch.Tensor, Aux]:
        """ids [B, T] -> logits [B, T, V]; with select (bool [B, T]) only the selected positions: [N, V]
        (training predicts the ~15% masked positions, not all of them). With return_aux also the MoE layers' Aux."""
        h, _, routing = self.encoder(ids)
        logits = self.mlm_head(h if select is None else h[select])
        return (logits, Aux.of(**{"encoder.stack": routing})) if return_aux else logits
