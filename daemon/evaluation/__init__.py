"""``anyfill eval``: HumanEval infilling (Bavarian et al. 2022) through the engine a press
uses, scored per backend (exact match, edit similarity, pass@1 when executed)."""
