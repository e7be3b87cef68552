"""Generative models written once as Pyro programs: the specification of each method.

Each module (``mm``, ``bce``, ``gbce``, ``nbce``, ``pcc``) exposes ``model(...)``
and one or more custom ``guide(...)`` functions usable with ``pyro.infer.SVI``.
Hand-written engines in :mod:`consensuskit.inference` are tested against them.
"""
