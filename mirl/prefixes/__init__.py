"""Misbehavior prefixes (paper section 3.4): sample training starts at labelled error steps, check that
they restore in a fresh sandbox (exactly, normalized, or by snapshot), and split off held-out ones."""
