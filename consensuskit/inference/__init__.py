"""Inference engines: EM, CAVI / variational EM, collapsed Gibbs, SVI, descent.

One module per algorithm.  Each iterative engine supplies ``init``/``step``/``objective``
and runs under the one fit driver (:mod:`consensuskit.inference.driver`: restarts or
chains, convergence, degeneracy, callbacks, progress, checkpoints, resume).  Engines
read the labels from :meth:`consensuskit.data.ensemble.Ensemble.label_data`; the estimators
in :mod:`consensuskit.estimators` wrap them with validation.
"""
