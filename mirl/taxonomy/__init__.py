"""Error taxonomy (paper section 3.3): group error steps into types, keep the frequent ones as
misbehaviors, and let a person curate the list."""
