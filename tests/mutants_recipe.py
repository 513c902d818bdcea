"""One-line bugs in the speedrun recipe's pieces (lab.tasks.optim's MuonAdamW and WSD; QK-norm, ReLU^2, soft-cap
and zero init in lab.nn / lab.models.gpt) that the tests of each piece and the Muon resume test must kill, and in
its config group (conf/recipe/speedrun.yaml, the presets that list it) that tests/conf/test_configs.py must kill,
for the mutation script (tests/mutants.py)."""
from __future__ import annotations

from mutants_moe import Mutant

CONF_RECIPE = ("tests/conf/test_configs.py",)
MUON = ("tests/tasks/test_muon.py",)
WSD = ("tests/tasks/test_optim.py::test_wsd_schedule_by_hand",)
QK_NORM = ("tests/nn/test_attention.py::test_qk_norm_attention_equals_a_naive_loop",
           "tests/nn/test_attention.py::test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys")
FFN = ("tests/nn/test_ffn.py",)
BLOCKS = ("tests/nn/test_blocks.py",)
DIST_MUON = ("tests/tasks/test_muon.py::test_distributed_muon_splits_the_matrices_over_ranks_with_two_collectives_per_bucket",)
BUCKETS = ("tests/tasks/test_muon.py::test_buckets_hold_whole_matrices_up_to_the_cap_in_parameter_order", *DIST_MUON)
MUON_EXPERTS = ("tests/tasks/test_muon.py::test_muon_experts_false_gives_the_expert_stacks_to_adamw_as_the_task_configures_it",)
RESUME_MUON = ("tests/runtime/trainer/test_resume.py::test_resumed_muon_run_continues_the_uninterrupted_curve",)

MUTANTS = [
    Mutant("muon: the hidden matrices go to AdamW", "lab/tasks/optim.py",
           'hidden = [p for p in g["params"] if roles[p] in muon_roles]',
           'hidden = [p for p in g["params"] if roles[p] in muon_roles and p.dim() > 2]', MUON),
    Mutant("muon: the head counts as a hidden matrix", "lab/nn/blocks.py",
           "Role.READOUT if any(m is r for r in readouts) else Role.HEAD",
           "Role.HIDDEN", MUON),
    Mutant("muon: a loaded state does not reach the inner optimizers", "lab/tasks/optim.py",
           "        super().load_state_dict(state_dict)  # replaces", "        return super().load_state_dict(state_dict)  # replaces",
           MUON + RESUME_MUON),
    Mutant("muon: AdamW never steps", "lab/tasks/optim.py",
           "        self.adamw.step()\n", "", MUON),
    Mutant("muon: the experts of a stack are orthogonalised as one joint matrix", "lab/tasks/optim.py",
           "torch.cat([items[i][0].reshape(n, *shape) for i, n in",
           "torch.cat([items[i][0].reshape(-1, shape[1]).unsqueeze(0) for i, n in", MUON),
    Mutant("muon: a stack's matrices are normalised by the stack's norm", "lab/tasks/optim.py",
           "torch.linalg.vector_norm(y, dim=(-2, -1), keepdim=True)", "y.norm()", MUON),
    Mutant("muon: the expert's lr is adjusted by the stack's first two sizes", "lab/tasks/optim.py",
           "w.add_(o, alpha=-adjusted_lr(lr, group[\"adjust_lr_fn\"], *p.shape[-2:]))",
           "w.add_(o, alpha=-adjusted_lr(lr, group[\"adjust_lr_fn\"], *p.shape[:2]))", MUON),
    Mutant("muon: tall matrices are not turned wide", "lab/tasks/optim.py",
           "    tall = x.size(-2) > x.size(-1)\n", "    tall = False\n", MUON),
    Mutant("muon: Nesterov ignored", "lab/tasks/optim.py",
           "update = p.grad.lerp(buf, momentum) if group[\"nesterov\"] else buf", "update = buf", MUON),
    Mutant("muon: weight decay before the update is dropped", "lab/tasks/optim.py",
           "            w.mul_(1 - lr * group[\"weight_decay\"])\n", "", MUON),
    Mutant("muon: match_rms_adamw's adjustment is the original's", "lab/tasks/optim.py",
           "return lr * 0.2 * math.sqrt(max(rows, cols))", "return lr * math.sqrt(max(1, rows / cols))", MUON),
    Mutant("muon: ns_dtype ignored (always bfloat16)", "lab/tasks/optim.py",
           "ns_dtype=NS_DTYPES[ns_dtype],", "ns_dtype=torch.bfloat16,", MUON),
    Mutant("muon: a stack's matrices mixed across shapes", "lab/tasks/optim.py",
           "key = (tuple(u.shape[-2:]), u.device,", "key = (tuple(sorted(u.shape[-2:])), u.device,", MUON),
    Mutant("muon: muon_experts=false ignored (experts stay in Muon)", "lab/tasks/optim.py",
           "MUON_ROLES if muon_experts else MUON_ROLES - {Role.EXPERT}", "MUON_ROLES", MUON_EXPERTS),
    Mutant("muon: muon_experts=false takes the routers out of Muon too", "lab/tasks/optim.py",
           "MUON_ROLES - {Role.EXPERT}", "MUON_ROLES - {Role.EXPERT, Role.ROUTER}", MUON_EXPERTS),
    Mutant("distributed muon: each rank orthogonalises its own shards of the matrices", "lab/tasks/optim.py",
           "if row_sharded(u) and u.ndim == 2:", "if False:", DIST_MUON),
    Mutant("distributed muon: rank 0 owns every matrix", "lab/tasks/optim.py",
           "owner[i] = min(range(ranks), key=lambda r: load[r])", "owner[i] = 0", DIST_MUON),
    Mutant("distributed muon: expert shards gathered whole on every rank", "lab/tasks/optim.py",
           "elif row_sharded(u) or not isinstance(u, DTensor):", "elif not isinstance(u, DTensor):", DIST_MUON),
    Mutant("distributed muon: shard rows rounded down", "lab/tasks/optim.py",
           "chunk = -(-rows // ranks)", "chunk = max(1, rows // ranks)", DIST_MUON),
    Mutant("distributed muon: the bucket cap ignored", "lab/tasks/optim.py",
           "if not runs or (cap is not None and total + size > cap):", "if not runs:", BUCKETS),
    Mutant("distributed muon: a bucket that reaches the cap exactly is split", "lab/tasks/optim.py",
           "total + size > cap", "total + size >= cap", BUCKETS),
    Mutant("distributed muon: owners planned bucket by bucket", "lab/tasks/optim.py",
           "[indices[j] for j in bucket], owner)", "[indices[j] for j in bucket], self._owners(members, [indices[j] for j in bucket]))",
           DIST_MUON),
    Mutant("distributed muon: muon_bucket_mb never reaches BatchedMuon", "lab/tasks/optim.py",
           "                                bucket_mb=muon_bucket_mb)", "                                bucket_mb=None)", BUCKETS),
    Mutant("wsd: the decay starts one step late", "lab/tasks/optim.py",
           "(step - (self.total_steps - decay_steps)) / decay_steps", "(step - 1 - (self.total_steps - decay_steps)) / decay_steps",
           WSD),
    Mutant("wsd: decays to 0 whatever min_lr", "lab/tasks/optim.py",
           "return 1.0 + (floor - 1.0) * progress", "return 1.0 - progress", WSD),
    Mutant("qk-norm: keys left unnormalised", "lab/nn/attention.py",
           "q, k = self._norm(q, self.q_norm), self._norm(k, self.k_norm)", "q = self._norm(q, self.q_norm)", QK_NORM),
    Mutant("qk-norm: normalises the values instead of the keys", "lab/nn/attention.py",
           "q, k = self._norm(q, self.q_norm), self._norm(k, self.k_norm)",
           "q, v = self._norm(q, self.q_norm), self._norm(v, self.k_norm)", QK_NORM),
    Mutant("relu_squared is plain relu", "lab/nn/ffn.py", "return F.relu(x).square()", "return F.relu(x)", FFN),
    Mutant("soft-cap forgets to scale back by the cap", "lab/nn/blocks.py",
           "return self.cap * torch.tanh(x / self.cap)", "return torch.tanh(x / self.cap)", BLOCKS),
    Mutant("soft-cap never applied", "lab/models/gpt.py",
           "logits = logits if self.softcap is None else self.softcap(logits)", "logits = logits", BLOCKS),
    Mutant("zero init leaves the projections random", "lab/nn/blocks.py",
           "std=0.0 if residual and zero_init_proj else", "std=std if residual and zero_init_proj else", BLOCKS),
    Mutant("zero init leaves an untied head random", "lab/models/gpt.py",
           "            nn.init.zeros_(self.lm_head.weight)", "            pass", BLOCKS),
    Mutant("compile=true leaves a language model's loss uncompiled", "lab/tasks/language_model.py",
           "        self._loss = torch.compile(self._loss)", "        pass",
           ["tests/tasks/test_optim.py::test_compile_for_training_compiles_the_loss_with_eager_numbers_and_leaves_decoding_eager"]),
    Mutant("MuonAdamW drops task.optimizer.fused", "lab/tasks/optim.py",
           "weight_decay=weight_decay,\n                                       fused=fused)",
           "weight_decay=weight_decay)", MUON),
    # conf/recipe/speedrun.yaml used by the fast presets' defaults, and +recipe= on the command line
    Mutant("gpt_small_fast lists the recipe before gpt_small (gpt_small's lr and schedule win)", "conf/experiment/gpt_small_fast.yaml",
           "  - gpt_small\n  - /recipe: speedrun\n", "  - /recipe: speedrun\n  - gpt_small\n", CONF_RECIPE),
    Mutant("gpt_nano_char_fast's own values come before the recipe's (its muon_lr lost)", "conf/experiment/gpt_nano_char_fast.yaml",
           "  - /recipe: speedrun\n  - _self_\n", "  - _self_\n  - /recipe: speedrun\n", CONF_RECIPE),
    Mutant("+recipe before +experiment accepted (the preset silently undoes the recipe)", "lab/runtime/cli/help.py",
           'keys.index("+recipe") < keys.index("+experiment")', 'keys.index("+recipe") > keys.index("+experiment")', CONF_RECIPE),
    Mutant("help reads a recipe's comments as recipe.* keys", "lab/runtime/cli/help.py",
           'add(path, "" if path.is_file() and path.read_text().startswith("# @package _global_") else group.replace("/", "."))',
           'add(path, group.replace("/", "."))', ("tests/runtime/cli/test_help.py::test_a_recipe_is_listed_and_its_comments_describe_the_whole_config",)),
]
