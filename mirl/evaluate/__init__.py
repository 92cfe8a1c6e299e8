"""Evaluation: the stages misbehavior rate on held-out prefixes (`misbehavior_rate`, stage 05) and
benchmark scores with pass@k (`pass_at_k`, stage 06), for the policies `policies` names, with their
params (`params`), the notebooks' tables and figures (`report`), the study design (`design`), and the
statistics both use (`stats`: pure functions over plain records, which the taxonomy's kappa uses too)."""
