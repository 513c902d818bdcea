"""One-line bugs in the parameter roles (lab.nn.blocks.parameter_roles, lab.nn.roles) and in the aux record a
forward returns (lab.nn.routing, the models, the tasks) that tests/nn/test_roles.py must kill, for the mutation
script (tests/mutants.py)."""
from __future__ import annotations

from mutants_moe import Mutant

ROLES = ("tests/nn/test_roles.py",)

MUTANTS = [
    Mutant("roles: the router is a plain hidden matrix", "lab/nn/blocks.py",
           "matrix_roles[id(m.router.weight)] = Role.ROUTER", "matrix_roles[id(m.router.weight)] = Role.HIDDEN", ROLES),
    Mutant("roles: the experts' stacked biases count as expert matrices", "lab/nn/blocks.py",
           "Role.EXPERT if p.dim() == 3 else Role.VECTOR", "Role.EXPERT", ROLES),
    Mutant("roles: an unknown matrix silently becomes hidden", "lab/nn/blocks.py",
           "        else:\n            raise TypeError(f\"parameter {name}",
           "        else:\n            roles[name] = Role.HIDDEN\n        if False:\n            raise TypeError(f\"parameter {name}",
           ROLES),
    Mutant("muon: experts go to AdamW", "lab/nn/roles.py",
           "MUON_ROLES = frozenset({Role.HIDDEN, Role.ROUTER, Role.EXPERT})", "MUON_ROLES = frozenset({Role.HIDDEN, Role.ROUTER})",
           ROLES),
    Mutant("muon: routers go to AdamW", "lab/nn/roles.py",
           "MUON_ROLES = frozenset({Role.HIDDEN, Role.ROUTER, Role.EXPERT})", "MUON_ROLES = frozenset({Role.HIDDEN, Role.EXPERT})",
           ROLES),
    Mutant("init: attention's output projection is not a residual projection", "lab/nn/attention.py",
           "self.out_proj = ResidualProjection(q_dim, d_model, bias=bias)", "self.out_proj = nn.Linear(q_dim, d_model, bias=bias)",
           ROLES),
    Mutant("aux: layers named by their module path with layers.", "lab/nn/routing.py",
           'return cls({f"{stack}.{i}": r', 'return cls({f"{stack}.layers.{i}": r', ROLES),
    Mutant("aux: the loss keeps only the last value", "lab/nn/routing.py",
           "total = total + value", "total = value", ROLES),
    Mutant("aux: the translator forgets its encoder's layers", "lab/models/seq2seq.py",
           "Aux.of(encoder=encoder_routing, decoder=decoder_routing)", "Aux.of(decoder=decoder_routing)", ROLES),
    Mutant("aux: the language model's training step drops the aux loss", "lab/tasks/language_model.py",
           "        aux_total = self.aux_loss(aux)\n        self.log_train({\"train/loss\": loss}, prog_bar=True)\n        return loss + aux_total",
           "        aux_total = self.aux_loss(aux)\n        self.log_train({\"train/loss\": loss}, prog_bar=True)\n        return loss",
           ROLES),
    Mutant("aux: a MoE block returns no record", "lab/nn/blocks.py",
           "return self._add(x, self.norm_ffn, y), routing", "return self._add(x, self.norm_ffn, y), None", ROLES),
]
