"""Consensus functions for comparison: KCC, CSPA, HGPA, MCLA, HBGF, EAC, QMI."""
