"""The one calling convention of every spec: label checks and the rows plate."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pyro
import pyro.distributions as dist
import torch

__all__ = ["check_labels", "rows_plate", "plate_rows", "as_labels", "float64_default",
           "label_distribution"]


def as_labels(labels, device=None):
    """``labels`` as a LongTensor (N, M) (from an Ensemble, numpy or torch); None stays None."""
    if labels is None:
        return None
    codes = getattr(labels, "codes", labels)
    t = torch.as_tensor(np.asarray(codes) if not torch.is_tensor(codes) else codes,
                        device=device)
    if t.dim() != 2 or t.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8):
        raise ValueError(f"labels must be an integer tensor of shape (N, M); got "
                         f"{tuple(t.shape)} {t.dtype}")
    return t.long()


def check_labels(labels, n_labels, n_rows):
    """Validate ``labels`` against ``n_labels`` and ``n_rows``.

    Returns ``(labels or None, N_data, M, device)`` where ``N_data`` is the number of rows
    given (or ``n_rows`` when simulating).
    """
    M = len(n_labels)
    if labels is None:
        if n_rows is None:
            raise ValueError("labels=None simulates: give n_rows, the number of rows")
        return None, int(n_rows), M, None
    labels = as_labels(labels)
    if labels.shape[1] != M:
        raise ValueError(f"labels has {labels.shape[1]} columns but n_labels has {M}")
    return labels, labels.shape[0], M, labels.device


@contextmanager
def rows_plate(labels, n_rows=None, subsample_size=None, subsample=None, device=None):
    """Open the ``"rows"`` plate (dim -1) and yield ``(indices, labels of those rows)``.

    ``labels`` holds either all ``n_rows`` rows (the plate picks its subsample) or only
    the rows of ``subsample`` (a streamed chunk, then ``n_rows`` is the total).  When
    simulating (``labels`` None) the yielded labels are None.
    """
    size = (None if labels is None else labels.shape[0]) if n_rows is None else int(n_rows)
    with pyro.plate("rows", size, dim=-1, subsample_size=subsample_size,
                    subsample=subsample, device=device) as ind:
        yield ind, plate_rows(labels, ind, size)


def plate_rows(data, ind, size, name="labels"):
    """The rows ``ind`` of the rows plate (size ``size``) taken from row-aligned ``data``.

    ``data`` (rows first) holds either all ``size`` rows or exactly the rows of the
    subsample (a streamed chunk); None stays None.  Other row-aligned data of a spec
    (GBCE's features) follows its labels through the plate with this.
    """
    if data is None:
        return None
    n = data.shape[0]
    if n == size:
        return data if ind.numel() == size else data.index_select(0, ind)
    if ind.numel() == n:
        return data
    raise ValueError(f"{name} has {n} rows, neither the plate size {size} nor "
                     f"the subsample size {ind.numel()}")


def label_distribution(probs):
    """``dist.Categorical(probs)`` of a label given its cluster, with its logits formed now.

    Under the rows plate (and the particle plate the scores add) Pyro expands a site's
    distribution to the plates' batch shape.  torch forms a Categorical's logits lazily, so
    an expanded one formed ``log(clamp(probs))`` over the whole expanded tensor --
    enumerated clusters x particles x columns x rows x labels -- at every ``log_prob``:
    15 million elements per call for BCE's spec scored with 200 particles on 240 rows
    (issue 27), half the CPU of its ``PyroConsensus`` fit.  Formed here, on ``probs`` as
    given, the logits are expanded as a view; their values are the same.
    """
    d = dist.Categorical(probs)
    _ = d.logits  # cached before any expand (torch's lazy property)
    return d


@contextmanager
def float64_default():
    """Run a block with torch's default dtype float64 (restored afterwards), so that specs
    whose precision follows the default dtype (NBCE, BCE's sampled alpha) work in float64."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)
