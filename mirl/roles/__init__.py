"""Judge and helper roles that run offline: reference-solution teacher and friends."""
