"""Truncated variational EM: the E-step operation, the M-step and the loop."""
