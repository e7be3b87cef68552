"""Distributed BCE on ``torch.distributed`` (gloo, CPU): row- and column-distributed EM.

* :func:`fit_distributed` -- spawn ``P`` local workers and fit (Python API); returns a
  fitted :class:`consensuskit.BCE`;
* ``torchrun ... -m consensuskit.distributed fit ...`` -- one process per rank on
  any number of machines (see :mod:`consensuskit.distributed.launch`);
* :mod:`.row` -- exact row-distributed EM and the paper's sequential heuristic;
* :mod:`.column` -- column-distributed (client-server) EM;
* :mod:`.comm` -- the instrumented communication layer.

Guide and cost model: ``docs/scaling_out.md``.  Names are imported lazily so
that worker processes do not import scikit-learn.
"""

from importlib import import_module

_LAZY = {
    "fit_distributed": "launch",
    "CommRecord": "launch",
    "DistributedFitError": "launch",
    "MODES": "launch",
    "CommError": "comm",
    "Message": "comm",
    "LocalComm": "comm",
    "TorchComm": "comm",
}

__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f"consensuskit.distributed.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'consensuskit.distributed' has no attribute {name!r}")
