"""Typed architecture config shared by every model built from the core."""
from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from typing import Any

from lab.errors import ConfigError

NORMS = ("layernorm", "rmsnorm")
NORM_PLACEMENTS = ("pre", "post")
POSITIONS = ("learned", "sinusoidal", "rotary", "relative", "none")
FFN_KINDS = ("relu", "gelu", "gelu_erf", "silu", "swiglu", "relu_squared")
ROPE_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_len")  # llama3_scaled's


ROUTERS = ("token_choice", "expert_choice")
GATES = ("softmax", "sigmoid")
SCOPES = ("local", "global")
DISPATCHES = ("auto", "grouped_mm", "loop")
PARAMETRIZATIONS = ("sp", "mup")
TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


@dataclass
class MoEConfig:
    """model.moe: every field optional; the defaults are a Switch/GShard-style top-2 layer."""

    num_experts: int = 8
    top_k: int = 2
    """Experts per token (token choice); for expert choice, the average experts per token the capacity buys."""
    expert_hidden: int | None = None
    """Hidden width of each expert; None: model.d_ff. Smaller = fine-grained experts (DeepSeekMoE)."""
    num_shared: int = 0
    """Always-on shared experts of width expert_hidden, run on every token (DeepSeekMoE)."""
    router: str = "token_choice"
    """token_choice | expert_choice (encoders only: an expert picking among all tokens sees the future)."""
    gate: str = "softmax"
    """Router score: softmax over experts (Switch, GShard) or sigmoid per expert (DeepSeek-V3), whose chosen
    scores are then renormalised as `renormalize` says."""
    renormalize: bool | None = None
    """Rescale the chosen top-k gates to sum to 1. None: yes for top_k > 1; no for top_k = 1, where it would
    make every gate 1 and leave the router no gradient from the task loss (Switch keeps the raw probability)."""
    jitter: float = 0.0
    """Multiplicative uniform noise (1 +- jitter) on the router input while training (Switch)."""
    capacity_factor: float | None = 1.25
    """Training capacity per expert = ceil(capacity_factor * top_k * real tokens / num_experts); assignments
    over it are dropped. None: dropless (token choice only)."""
    capacity_factor_eval: float | None = 2.0
    """The same in eval mode (validation, test, generation); None: dropless."""
    load_balance_weight: float = 0.01
    load_balance_scope: str = "local"
    """local: f_i over this device's tokens (Switch); global: over the whole data-parallel batch (expert counts
    all-reduced over the ranks every step; the same as local on one device)."""
    z_loss_weight: float = 0.001
    bias_update_rate: float = 0.0
    """Auxiliary-loss-free balancing (DeepSeek-V3, their gamma = 0.001): > 0 adds a per-expert bias to the
    scores for expert selection only and moves it by this much after every training forward, towards the mean
    load (counted over all data-parallel ranks). 0: off. Token choice only."""
    dispatch: str = "auto"
    """How experts run: grouped_mm (one grouped matmul per projection, no host sync, compiles), loop (one matmul
    pair per expert, reads the group sizes to the host), auto: grouped_mm where the device and dtype support
    it (CPU float32/bfloat16/float16, CUDA bfloat16 on sm80+) except eager on a CPU with <= 8 experts (where
    the loop measured faster: benchmarks/moe.py), else loop."""
    every_n: int = 1
    """MoE on every n-th layer (layers n, 2n, ...; 2 = every other layer as in GShard/Switch), dense elsewhere."""

    @classmethod
    def from_settings(cls, settings) -> MoEConfig:
        """model.moe as a mapping (a saved checkpoint's config, an import's settings): unknown fields are one
        ConfigError naming them; TransformerConfig validates the result against its n_layers."""
        settings = dict(settings)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ConfigError(f"unknown model.moe field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        hints = typing.get_type_hints(cls)
        for name, value in settings.items():  # the types: the Hydra schema leaves model.moe untyped (TransformerConfig.moe)
            kinds = typing.get_args(hints[name]) or (hints[name],)
            if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds + (int,) * (float in kinds)):
                wanted = " or ".join(TYPE_WORDS[k] for k in kinds)
                raise ConfigError(f"model.moe.{name}={value!r} must be {wanted}; set model.moe.{name}=<that>")
        return cls(**settings)

    def validate(self, n_layers: int) -> None:
        def fail(field: str, why: str) -> None:
            raise ConfigError(f"model.moe.{field}={getattr(self, field)!r}: {why}")

        if self.num_experts < 1:
            fail("num_experts", "need at least one expert")
        if not 1 <= self.top_k <= self.num_experts:
            fail("top_k", f"must be between 1 and num_experts={self.num_experts}")
        for name, choices in (("router", ROUTERS), ("gate", GATES), ("load_balance_scope", SCOPES),
                              ("dispatch", DISPATCHES)):
            if getattr(self, name) not in choices:
                fail(name, f"choose one of {', '.join(choices)}")
        for name in ("capacity_factor", "capacity_factor_eval"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                fail(name, "must be positive, or null for dropless")
            if value is None and self.router == "expert_choice":
                fail(name, "expert-choice routing needs a capacity (experts pick a fixed number of tokens)")
        if self.expert_hidden is not None and self.expert_hidden < 1:
            fail("expert_hidden", "must be a positive width, or null for model.d_ff")
        if self.num_shared < 0:
            fail("num_shared", "must be 0 or more")
        if not 0.0 <= self.jitter < 1.0:
            fail("jitter", "must be in [0, 1)")
        for name in ("load_balance_weight", "z_loss_weight", "bias_update_rate"):
            if getattr(self, name) < 0:
                fail(name, "must be >= 0")
        if self.bias_update_rate and self.router == "expert_choice":
            fail("bias_update_rate", "balances token-choice routing; expert choice is balanced by construction")
        if not 1 <= self.every_n <= n_layers:
            fail("every_n", f"must be between 1 and model.n_layers={n_layers}, or no layer would be MoE")

    def applies_to(self, layer: int) -> bool:
        """Is layer `layer` (0-based) a MoE layer? Layers n-1, 2n-1, ... (every n-th, counting from 1)."""
        return (layer + 1) % self.every_n == 0


def scaled_to_base(cfg: TransformerConfig, name: str, value: int) -> int:
    """A width of this model at the µP base: value x mup_base_width / d_model, which must be a whole number (else
    the base's own value is asked for)."""
    base, rest = divmod(value * cfg.mup_base_width, cfg.d_model)
    if rest or base < 1:
        raise ConfigError(f"model.{name}={value} x mup_base_width {cfg.mup_base_width} / d_model {cfg.d_model} is not a "
                          f"whole number: set {'a proportional ' + name if '.' in name else 'model.mup_base_' + name}")
    return base


@dataclass
class TransformerConfig:
    """Every architectural choice of a transformer stack, as one flat record.

    GPT-2 layout: pre-norm, layernorm, learned positions, gelu, tied embeddings.
    BERT layout: post-norm, layernorm, learned positions, gelu, embed_norm=True.
    "Attention Is All You Need" layout: post-norm, layernorm, sinusoidal positions, relu,
    scale_embeddings=True.
    """

    d_model: int = 128
    """Width of the residual stream."""
    n_layers: int = 4
    """Number of blocks in the stack (per side for an encoder-decoder)."""
    n_heads: int = 4
    """Attention heads; must divide d_model."""
    head_dim: int | None = None
    """Width of each attention head: queries n_heads * head_dim, keys and values n_kv_heads * head_dim, the output
    projection back to d_model; rotary and qk_norm act over it (set, n_heads need not divide d_model).
    None: d_model // n_heads. Released checkpoints may set another (Qwen3-0.6B: d_model 1024, 16 heads of 128)."""
    n_kv_heads: int | None = None
    """Key/value heads (grouped-query attention, Ainslie et al. 2023; Llama 3, Mistral): each serves
    n_heads / n_kv_heads consecutive query heads, so the KV cache is that many times smaller; must divide n_heads.
    None: n_heads (multi-head attention); 1: multi-query attention."""
    d_ff: int | None = None
    """Hidden width of the feed-forward block. None: 4*d_model, or 8/3*d_model (rounded to 64) for swiglu,
    which keeps the parameter count of the 4x two-matrix FFN."""
    dropout: float = 0.0
    """Dropout on embeddings, attention weights and residual branches."""
    bias: bool = True
    """Bias in linear layers and LayerNorm."""
    norm: str = "layernorm"
    """layernorm | rmsnorm."""
    norm_eps: float | None = None
    """The norms' epsilon (added to the variance). None: 1e-5 for layernorm (PyTorch's), 1e-6 for rmsnorm;
    imported checkpoints bring theirs (Llama 2: 1e-5)."""
    norm_placement: str = "pre"
    """pre: x + f(norm(x)) with a final norm (GPT-2); post: norm(x + f(x)) (Vaswani et al.)."""
    positions: str = "learned"
    """learned | sinusoidal (added to embeddings) | rotary (applied to queries/keys) | relative (T5's bucketed
    relative position bias, one learned scalar per head and distance bucket added to the attention logits of
    every layer: lab.nn.positions.RelativePositionBias) | none."""
    relative_buckets: int = 32
    """positions=relative: distance buckets per stack (T5: 32; an encoder splits them between the two directions),
    half exact distances, half logarithmically wider up to relative_max_distance."""
    relative_max_distance: int = 128
    """positions=relative: distances from this on share the last bucket (T5: 128)."""
    rope_base: float = 10000.0
    """Rotary positions' base (theta): pair i of a head turns by position * base^(-2i/head_dim); long-context
    checkpoints use larger bases (Llama 3: 500000)."""
    rope_scaling: Any = None  # dict[str, float] | None: see `moe` for why Any
    """Llama 3.1's rotary frequency scaling, {factor, low_freq_factor, high_freq_factor, original_max_len}
    (lab.nn.positions.llama3_scaled; Llama 3.1/3.2: 8 or 32, 1, 4, 8192); imported checkpoints bring theirs.
    None: the plain frequencies."""
    ffn: str = "gelu"
    """relu | gelu (tanh-approximate, GPT-2's code) | gelu_erf (exact, as transformers' "gelu"; dense FFNs only) |
    silu (x·sigmoid(x), transformers' "swish" of released Marian models; dense FFNs only) |
    swiglu | relu_squared (relu(x)^2, Primer; dense FFNs only)."""
    max_seq_len: int = 256
    """Longest sequence the position tables and KV caches hold."""
    tie_embeddings: bool = True
    """Share the token embedding matrix with the output projection."""
    scale_embeddings: bool = False
    """Multiply token embeddings by sqrt(d_model) (Vaswani et al. 3.4)."""
    output_scale: bool = False
    """Multiply the last hidden state by d_model^-0.5 before the output projection over the vocabulary (T5, Switch
    Transformers: with a tied embedding initialised at std 1, embed_init_std=1.0, the logits start small while the
    inputs are at unit scale; the output-side counterpart of scale_embeddings). GPT and the translator."""
    embed_norm: bool = False
    """Normalise the summed token + position embeddings (a `norm` layer) before the first block, as BERT does."""
    init_std: float = 0.02
    """Std of the normal init; residual output projections get init_std / sqrt(2 * n_layers) (GPT-2)."""
    embed_init_std: float | None = None
    """Std of the token embeddings' normal init; None: init_std. T5 initialises them at 1.0 (with output_scale)."""
    attention_scale: float | None = None
    """Factor on the query-key dot products before the softmax. None: 1/sqrt(head_dim) (Vaswani et al.); T5 and
    Switch Transformers use 1.0 (their initialisation folds the scale into the queries)."""
    qk_norm: bool = False
    """RMS-normalise each head's queries and keys (learned gain per head dim) before rotary and the dot product
    (Dehghani et al. 2023; OLMo 2; Qwen3): attention logits stay bounded, so higher learning rates train stably.
    Its epsilon is model.norm_eps under rmsnorm (as Qwen3's), 1e-6 under layernorm."""
    # MoEConfig | None once built (a mapping of its fields becomes one). Typed Any for the Hydra schema: OmegaConf
    # 2.3 cannot merge a command-line mapping (model.moe={...}) into a typed node whose value is None.
    moe: Any = None
    """Mixture-of-experts settings replacing the dense FFN (lab.nn.config.MoEConfig's fields); None for dense."""
    parametrization: str = "sp"
    """sp (standard: GPT-2 init, one Adam lr for every matrix) | mup (µP, Yang et al. 2022: init, Adam lrs, attention
    scale and output multiplier scaled relative to the base shape below, so the lr tuned at the base transfers to
    other widths; at the base shape it equals sp exactly). Rules: lab/nn/mup.py; workflow: docs/mup.md."""
    mup_base_width: int | None = None
    """parametrization=mup: the d_model of the base model whose tuned hyperparameters transfer. None: d_model (this
    model is the base). Unused under sp."""
    mup_base_head_dim: int | None = None
    """parametrization=mup: the base model's head_dim. None: head_dim x mup_base_width / d_model (n_heads fixed,
    heads widen with the model). Unused under sp."""
    mup_base_d_ff: int | None = None
    """parametrization=mup: the base model's d_ff (experts' own width, moe.expert_hidden, scales with d_model too).
    None: d_ff x mup_base_width / d_model. Unused under sp."""

    def __post_init__(self) -> None:
        """What the types cannot say: choices, ranges and cross-field rules; fills the derived fields (None ->
        their value). The CLI runs it on the composed config before anything heavy (lab.runtime.cli.config_checks)."""
        def check(name: str, value: Any, allowed: tuple[str, ...]) -> None:
            if value not in allowed:
                raise ConfigError(f"model.{name}={value!r} is not supported; choose one of {', '.join(allowed)}")

        def refuse(name: str, what: str) -> None:
            raise ConfigError(f"model.{name}={getattr(self, name)!r} must be {what}; set model.{name}=<that>")

        check("norm", self.norm, NORMS)
        check("norm_placement", self.norm_placement, NORM_PLACEMENTS)
        check("positions", self.positions, POSITIONS)
        check("ffn", self.ffn, FFN_KINDS)
        if self.moe is not None:
            self.moe = self.moe if isinstance(self.moe, MoEConfig) else MoEConfig.from_settings(self.moe)
        if self.ffn in ("relu_squared", "gelu_erf", "silu") and self.moe:
            raise ConfigError(f"model.ffn={self.ffn} is for dense FFNs; the experts support relu, gelu and swiglu: "
                              "set model.ffn=gelu (or model.moe=null)")
        for name in ("d_model", "n_layers", "n_heads", "max_seq_len"):
            if int(getattr(self, name)) <= 0:
                refuse(name, "an integer >= 1")
        for name, value, meaning in (("head_dim", self.head_dim, "d_model // n_heads"),
                                     ("n_kv_heads", self.n_kv_heads, "n_heads"), ("d_ff", self.d_ff, "4 * d_model")):
            if value is not None and int(value) <= 0:
                refuse(name, f"an integer >= 1 or null ({meaning})")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}; choose n_heads among "
                f"{[h for h in range(1, self.d_model + 1) if self.d_model % h == 0][-6:]} (or set model.head_dim)"
            )
        if self.head_dim is None:
            self.head_dim = self.d_model // self.n_heads
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.n_heads % self.n_kv_heads:
            divisors = [h for h in range(1, self.n_heads + 1) if self.n_heads % h == 0]
            raise ConfigError(f"model.n_kv_heads={self.n_kv_heads} does not divide model.n_heads={self.n_heads}; "
                              f"pick n_kv_heads among {divisors} (or null: one per query head)")
        if self.positions == "rotary" and self.head_dim % 2:
            raise ConfigError(f"rotary positions need an even head size, got model.head_dim={self.head_dim} (null: "
                              "d_model / n_heads)")
        if self.positions == "relative" and not (self.relative_buckets >= 4
                                                 and self.relative_max_distance > self.relative_buckets // 2):
            raise ConfigError(f"relative positions need model.relative_buckets >= 4 and model.relative_max_distance > "
                              f"relative_buckets / 2, got {self.relative_buckets} and {self.relative_max_distance} "
                              "(T5: 32 and 128)")
        if not float(self.init_std) > 0:
            refuse("init_std", "a number in (0, inf)")
        if self.embed_init_std is not None and not float(self.embed_init_std) > 0:
            refuse("embed_init_std", "a number in (0, inf), or null for model.init_std")
        if self.attention_scale is not None and not float(self.attention_scale) > 0:
            refuse("attention_scale", "a number in (0, inf), or null for 1/sqrt(head_dim)")
        if not 0.0 <= self.dropout < 1.0:
            refuse("dropout", "a probability in [0, 1)")
        if self.norm_eps is None:
            self.norm_eps = 1e-5 if self.norm == "layernorm" else 1e-6
        for name in ("norm_eps", "rope_base"):
            if not float(getattr(self, name)) > 0:
                refuse(name, "a number in (0, inf)")
        if self.rope_scaling is not None:
            try:
                scaling = {k: float(v) for k, v in dict(self.rope_scaling).items()}
            except (TypeError, ValueError):
                scaling = {}
            if sorted(scaling) != sorted(ROPE_SCALING_KEYS) or min(scaling.values()) <= 0 \
                    or scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
                raise ConfigError(f"model.rope_scaling={self.rope_scaling} needs the numbers "
                                  f"{', '.join(ROPE_SCALING_KEYS)}, all positive, high_freq_factor > low_freq_factor "
                                  "(Llama 3.1: model.rope_scaling={factor:8,low_freq_factor:1,high_freq_factor:4,"
                                  "original_max_len:8192}), or null")
            self.rope_scaling = scaling
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model if self.ffn != "swiglu" else 64 * round(8 * self.d_model / 3 / 64)
        if self.moe is not None:
            self.moe.validate(self.n_layers)
        check("parametrization", self.parametrization, PARAMETRIZATIONS)
        if self.parametrization == "mup":
            self._fill_mup_base()

    def _fill_mup_base(self) -> None:
        """The base shape's unset fields, proportional to d_model (whole numbers, or the field must be set)."""
        if self.mup_base_width is None:
            self.mup_base_width = self.d_model
        for name in ("mup_base_width", "mup_base_head_dim", "mup_base_d_ff"):
            value = getattr(self, name)
            if value is not None and int(value) <= 0:
                raise ConfigError(f"model.{name}={value!r} must be an integer >= 1, or null (module lab.nn.mup)")
        if self.mup_base_head_dim is None:
            self.mup_base_head_dim = scaled_to_base(self, "head_dim", self.head_dim)
        if self.mup_base_d_ff is None:
            self.mup_base_d_ff = scaled_to_base(self, "d_ff", self.d_ff)
        if self.positions == "rotary" and self.mup_base_head_dim % 2:
            raise ConfigError(f"rotary positions need an even base head size, got model.mup_base_head_dim="
                              f"{self.mup_base_head_dim}")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> TransformerConfig:
        """Build from a model config's fields; unknown fields get one clear error instead of a TypeError."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(
                f"unknown model field(s) {', '.join(unknown)}; known fields: {', '.join(sorted(known))}"
            )
        return cls(**kwargs)
