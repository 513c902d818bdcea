# The per-component ablation's variants, sourced by ablation.sh (CPU) and ablation_gpu.sh (one GPU): each changes
# ONE thing of translator_small (modern) or translator_vanilla, or the learning rate / warmup / init of one.
# Written when translator_small had no embedding scale, lr 2e-3, warmup 150 and 2000 steps (the ablation's
# configs, experiments/translator/README.md); `git checkout 69649cd` (ablation_gpu.sh) reproduces the table.
# shellcheck disable=SC2034
declare -A ARGS=(
  [small]="+experiment=translator_small"
  [small+post]="+experiment=translator_small model.norm_placement=post"
  [small+sinusoidal]="+experiment=translator_small model.positions=sinusoidal"
  [small+relu]="+experiment=translator_small model.ffn=relu"
  [small+scaled_emb]="+experiment=translator_small model.scale_embeddings=true"
  [small+untied]="+experiment=translator_small model.tie_embeddings=false"
  [small+unshared]="+experiment=translator_small model.share_embeddings=false"
  [small+lr1e-3]="+experiment=translator_small task.optimizer.lr=1e-3"
  [small+lr4e-3]="+experiment=translator_small task.optimizer.lr=4e-3"
  [small+warmup500]="+experiment=translator_small task.scheduler.warmup_steps=500"
  [small+init_std0.05]="+experiment=translator_small model.init_std=0.05"
  [vanilla]="+experiment=translator_vanilla"
  [vanilla+pre]="+experiment=translator_vanilla model.norm_placement=pre"
  [vanilla+rotary]="+experiment=translator_vanilla model.positions=rotary"
  [vanilla+swiglu]="+experiment=translator_vanilla model.ffn=swiglu"
  [vanilla+unscaled_emb]="+experiment=translator_vanilla model.scale_embeddings=false"
  [vanilla+untied]="+experiment=translator_vanilla model.tie_embeddings=false"
  [vanilla+unshared]="+experiment=translator_vanilla model.share_embeddings=false"
  [vanilla+lr1e-3]="+experiment=translator_vanilla task.optimizer.lr=1e-3"
  [vanilla+lr4e-3]="+experiment=translator_vanilla task.optimizer.lr=4e-3"
  [vanilla+warmup500]="+experiment=translator_vanilla task.scheduler.warmup_steps=500"
)
# the most telling first, so a run cut short still has them
ORDER=(small vanilla small+post small+sinusoidal small+relu small+scaled_emb small+lr1e-3 small+lr4e-3 vanilla+pre
       small+untied small+warmup500 small+init_std0.05 vanilla+rotary vanilla+swiglu vanilla+unscaled_emb vanilla+lr4e-3
       vanilla+lr1e-3 small+unshared vanilla+warmup500 vanilla+untied vanilla+unshared)
