"""Making the models: tokenizer, tiny models, SFT, LoRA merge, distillation, builds."""
