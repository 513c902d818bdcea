"""lab models in and out of the Hugging Face format (docs/hf_families.md): one module per transformers family."""
