"""Problems and their grading: datasets, the synthetic generator, prompts, answer checks."""
