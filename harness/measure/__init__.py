"""Measurements beside a run: interleaved pairing and pre-flight acceptance."""
