"""lab's translator in the pre-norm layout with sinusoidal positions -> transformers' PegasusForConditionalGeneration:
Marian's layers with the norm before each sublayer and one after the last layer of each side (the same mapping,
the same sinusoidal table: lab.hf.marian)."""
from __future__ import annotations

from lab.hf import marian


class Pegasus(marian.Marian):
    hf_class = "PegasusForConditionalGeneration"
    layout = "pre-norm layernorm, sinusoidal positions, relu or gelu FFN, shared source/target embeddings, no MoE"

    def check(self, model) -> list[str]:
        missing = [m for m in super().check(model) if m != "model.norm_placement=post"]
        return missing if model.cfg.norm_placement == "pre" else [*missing, "model.norm_placement=pre"]

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        config, s = marian.convert_layers(model, "pegasus")
        for key in ("share_encoder_decoder_embeddings", "decoder_vocab_size"):  # Marian's own fields
            del config[key]
        return config, s

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """PegasusForConditionalGeneration's config.json -> lab.models.seq2seq.EncoderDecoder's arguments."""
        return marian.layers_arch(config, state, "pre")
