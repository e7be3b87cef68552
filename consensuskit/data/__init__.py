"""Data in: the validated label matrix (``ensemble``), bundled datasets (``datasets``) and
ensemble generators (``generate``)."""
