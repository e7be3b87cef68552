"""Inference engines: EM, CAVI / variational EM, collapsed Gibbs, SVI, descent.

One module per algorithm.  Engines work on plain arrays / tensors; the
estimators in :mod:`consensuskit.estimators` wrap them with validation.
"""
