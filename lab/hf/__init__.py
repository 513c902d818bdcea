"""lab models in and out of the Hugging Face format (docs/export.md; adding a family: docs/hf_families.md).
import-linter keeps the layers, top to bottom:

    importing   a Hugging Face directory -> lab's model and tokenizer; model.init_from
    exporting   a lab model -> a directory transformers loads, through the family that reproduces it
    registry    FAMILIES, one entry per transformers class; the lab model class of each kind
    gpt2, llama, mistral, mixtral, qwen3, apertus, marian, pegasus, t5, switch, bert: one module per family
    family      the interface every family implements (Family) and what their mappings share
    tokenizer   lab's tokenizers as tokenizer.json & co.
"""
