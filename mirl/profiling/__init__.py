"""Error profiling (paper section 3.2): roll the policy out, judge each proposed step before it runs,
replace flagged steps with a teacher's correction, and record every flagged step with its prefix."""
