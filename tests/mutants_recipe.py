"""One-line bugs in the speedrun recipe's pieces (lab.tasks.optim's MuonAdamW and WSD; QK-norm, ReLU^2, soft-cap
and zero init in lab.nn / lab.models.gpt) that tests/test_recipe.py and the Muon resume test must kill, for the
mutation script (tests/mutants.py)."""
from __future__ import annotations

from mutants_moe import Mutant

RECIPE = ("tests/test_recipe.py",)
RESUME_MUON = ("tests/test_resume.py::test_resumed_muon_run_continues_the_uninterrupted_curve",)

MUTANTS = [
    Mutant("muon: the hidden matrices go to AdamW", "lab/tasks/optim.py",
           'hidden = [p for p in g["params"] if roles[p] in MUON_ROLES]',
           'hidden = [p for p in g["params"] if roles[p] in MUON_ROLES and p.dim() > 2]', RECIPE),
    Mutant("muon: the head counts as a hidden matrix", "lab/nn/blocks.py",
           "Role.READOUT if any(m is r for r in readouts) else Role.HEAD",
           "Role.HIDDEN", RECIPE),
    Mutant("muon: a loaded state does not reach the inner optimizers", "lab/tasks/optim.py",
           "        super().load_state_dict(state_dict)  # replaces", "        return super().load_state_dict(state_dict)  # replaces",
           RECIPE + RESUME_MUON),
    Mutant("muon: AdamW never steps", "lab/tasks/optim.py",
           "        self.adamw.step()\n", "", RECIPE),
    Mutant("wsd: the decay starts one step late", "lab/tasks/optim.py",
           "(step - (self.total_steps - decay_steps)) / decay_steps", "(step - 1 - (self.total_steps - decay_steps)) / decay_steps",
           RECIPE),
    Mutant("wsd: decays to 0 whatever min_lr", "lab/tasks/optim.py",
           "return 1.0 + (floor - 1.0) * progress", "return 1.0 - progress", RECIPE),
    Mutant("qk-norm: keys left unnormalised", "lab/nn/attention.py",
           "q, k = self._norm(q, self.q_norm), self._norm(k, self.k_norm)", "q = self._norm(q, self.q_norm)", RECIPE),
    Mutant("qk-norm: normalises the values instead of the keys", "lab/nn/attention.py",
           "q, k = self._norm(q, self.q_norm), self._norm(k, self.k_norm)",
           "q, v = self._norm(q, self.q_norm), self._norm(v, self.k_norm)", RECIPE),
    Mutant("relu_squared is plain relu", "lab/nn/ffn.py", "return F.relu(x).square()", "return F.relu(x)", RECIPE),
    Mutant("soft-cap forgets to scale back by the cap", "lab/nn/blocks.py",
           "return self.cap * torch.tanh(x / self.cap)", "return torch.tanh(x / self.cap)", RECIPE),
    Mutant("soft-cap never applied", "lab/models/gpt.py",
           "logits = logits if self.softcap is None else self.softcap(logits)", "logits = logits", RECIPE),
    Mutant("zero init leaves the projections random", "lab/nn/blocks.py",
           "std=0.0 if residual and zero_init_proj else", "std=std if residual and zero_init_proj else", RECIPE),
    Mutant("zero init leaves an untied head random", "lab/models/gpt.py",
           "            nn.init.zeros_(self.lm_head.weight)", "            pass", RECIPE),
    Mutant("compile=true leaves a language model's loss uncompiled", "lab/tasks/language_model.py",
           "        self._loss = torch.compile(self._loss)", "        pass",
           ["tests/test_tasks.py::test_compile_for_training_compiles_the_loss_with_eager_numbers_and_leaves_decoding_eager"]),
    Mutant("MuonAdamW drops task.optimizer.fused", "lab/tasks/optim.py",
           "weight_decay=weight_decay,\n                                       fused=fused)",
           "weight_decay=weight_decay)", RECIPE),
]
