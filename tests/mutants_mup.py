"""One-line bugs in model.parametrization=mup (lab.nn.mup, its optimizer groups in lab.tasks.optim, the models'
output multiplier) that tests/nn/test_mup.py must kill, for the mutation script (tests/mutants.py)."""
from __future__ import annotations

from mutants_moe import Mutant

MUP = ("tests/nn/test_mup.py",)
COORD = ("tests/nn/test_mup.py::test_coordinate_check_flat_under_mup_growing_under_sp",)
FSDP = ("tests/nn/test_mup_fsdp.py",)
TRANSFER = ("tests/report/test_transfer.py",)

MUTANTS = [
    Mutant("mup: hidden matrices keep sp's Adam lr", "lab/nn/mup.py",
           "Scale(init=fan_in_mult ** -0.5, lr=1 / fan_in_mult)", "Scale(init=fan_in_mult ** -0.5, lr=1.0)", MUP),
    Mutant("mup: hidden matrices keep sp's init", "lab/nn/mup.py",
           "Scale(init=fan_in_mult ** -0.5, lr=1 / fan_in_mult)", "Scale(init=1.0, lr=1 / fan_in_mult)", MUP),
    Mutant("mup: hidden lr / width_mult^2", "lab/nn/mup.py",
           "Scale(init=fan_in_mult ** -0.5, lr=1 / fan_in_mult)", "Scale(init=fan_in_mult ** -0.5, lr=fan_in_mult ** -2)",
           MUP),
    Mutant("mup: a readout-like matrix initialised as a hidden one", "lab/nn/mup.py",
           "Scale(init=1 / fan_in_mult, lr=1 / fan_in_mult)", "Scale(init=fan_in_mult ** -0.5, lr=1 / fan_in_mult)", MUP),
    Mutant("mup: embeddings scaled like matrices", "lab/nn/mup.py",
           "if role in INPUT_ROLES or len(shape) < 2:", "if len(shape) < 2:", MUP),
    Mutant("mup: the base twin has no cross-attention", "lab/nn/mup.py",
           "cross_attention=m.layers[0].cross_attn is not None)", "cross_attention=False)", MUP),
    Mutant("mup: attention keeps 1/sqrt(head_dim)", "lab/nn/mup.py",
           "return at_base * cfg.mup_base_head_dim / cfg.head_dim", "return at_base * (cfg.mup_base_head_dim / cfg.head_dim) ** 0.5",
           MUP),
    Mutant("mup: no output multiplier on a tied head", "lab/nn/mup.py",
           "factor *= cfg.mup_base_width / cfg.d_model", "factor *= 1.0", MUP),
    Mutant("mup: scale_embeddings grows with width", "lab/nn/mup.py",
           "math.sqrt(base_width(cfg)) if cfg.scale_embeddings", "math.sqrt(cfg.d_model) if cfg.scale_embeddings", MUP),
    Mutant("mup: init rescale skipped", "lab/nn/mup.py", "params[name].mul_(scale.init)", "pass", MUP),
    Mutant("mup: init_from accepted", "lab/nn/mup.py", "if init_from and is_mup(cfg):", "if False:", MUP),
    Mutant("mup: the base head size is the model's", "lab/nn/config.py",
           "self.mup_base_head_dim = scaled_to_base(self, \"head_dim\", self.head_dim)",
           "self.mup_base_head_dim = self.head_dim", MUP),
    Mutant("mup: weight decay not rescaled with the lr", "lab/tasks/optim.py",
           "g[\"weight_decay\"] /= scale", "g[\"weight_decay\"] *= 1.0", MUP),
    Mutant("mup: lr divided by the factor", "lab/tasks/optim.py", "g[\"lr\"] *= scale", "g[\"lr\"] /= scale", MUP),
    Mutant("mup: scaled groups first", "lab/tasks/optim.py",
           "key=lambda item: item[0] != 1.0)", "key=lambda item: item[0] == 1.0)", MUP),
    Mutant("mup: exported away from the base", "lab/hf/exporting.py", "if not at_base(model.cfg):", "if False:", MUP),
    # what the coordinate check alone catches (its docstring names them)
    Mutant("mup coord: hidden lr at sp", "lab/nn/mup.py",
           "Scale(init=fan_in_mult ** -0.5, lr=1 / fan_in_mult)", "Scale(init=1.0, lr=1.0)", COORD),
    Mutant("mup coord: no output multiplier", "lab/nn/mup.py",
           "factor *= cfg.mup_base_width / cfg.d_model", "factor *= 1.0", COORD),
    Mutant("mup coord: hidden lr / width_mult^2", "lab/nn/mup.py",
           "Scale(init=fan_in_mult ** -0.5, lr=1 / fan_in_mult)", "Scale(init=fan_in_mult ** -0.5, lr=fan_in_mult ** -2)",
           COORD),
    # under FSDP2, and the transfer figure's lr
    Mutant("mup fsdp: hidden lr at sp", "lab/nn/mup.py",
           "Scale(init=fan_in_mult ** -0.5, lr=1 / fan_in_mult)", "Scale(init=fan_in_mult ** -0.5, lr=1.0)", FSDP),
    Mutant("mup fsdp: lr divided by the factor", "lab/tasks/optim.py", "g[\"lr\"] *= scale", "g[\"lr\"] /= scale", FSDP),
    Mutant("mup transfer: a Muon sweep drawn against the fixed Adam lr", "lab/report/transfer.py",
           "if len(muon - {None}) > 1:", "if False:", TRANSFER),
]
