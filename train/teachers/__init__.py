"""Teachers that write the training data: Gemini (Batch API), a local vLLM model, or the
exact synthetic solver. See :mod:`train.teachers.base` for the interface."""
