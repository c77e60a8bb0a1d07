"""draftbench harness: benchmark draft-model speculative decoding on vLLM."""
