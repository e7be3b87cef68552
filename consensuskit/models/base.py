"""The base of the model families' estimators fitted by the driver: what they share.

A family's estimator (BCE, GBCE, NBCE) declares its hyper-parameters' constraints once
(:attr:`DriverFitMixin._parameter_checks`, as scikit-learn's estimators declare theirs;
another name than scikit-learn's ``_parameter_constraints``, whose checks expect
scikit-learn's own constraint types) and the
``inference`` value whose engine runs under the fit driver
(:attr:`DriverFitMixin._driver_inference`: CAVI for BCE, Gibbs for NBCE).  This mixin
then owns what was written once per family:

* ``fit(X, y=None, resume_from=None)``: the label matrix read as an
  :class:`~consensuskit.data.ensemble.Ensemble`, the checkpoint to resume read and checked
  against the data and hyper-parameters (:mod:`consensuskit.io.checkpoint`), then the
  family's ``_fit(ensemble, resume=...)``;
* the validation of the declared constraints (:meth:`_validate_parameters`), of the
  callback and checkpoint options, and that those options are asked of the driven engine
  only (:meth:`_check_driver_options`);
* the driver call: ``n_init`` restarts of the family's engine under
  :func:`consensuskit.inference.driver.fit` with the callback, checkpoints and progress
  bar (:meth:`_drive`), and the report of degenerate restarts (:meth:`_report_restarts`).

The family supplies ``_fit`` (builds its engine, calls :meth:`_drive`, sets the fitted
attributes with its fitted-state setter, which calls :meth:`_report_restarts`) and
``_pointwise_log_likelihood`` (its per-row scorer, :class:`consensuskit.base.GenerativeMixin`).
NBCE's sampler runs its chains under the driver itself (``gibbs_nbce``), so NBCE uses the
fit, resume and checks only.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from consensuskit.base import check_positive_float, check_positive_int, degenerate_advice
from consensuskit.data.ensemble import as_ensemble
from consensuskit.inference.driver import fit as drive
from consensuskit.io.checkpoint import check_checkpoint_params, checkpoint_writer, read_checkpoint

__all__ = ["DriverFitMixin", "Integer", "Real", "OneOf"]


@dataclass(frozen=True)
class Integer:
    """An int ``>= minimum`` (or None where ``optional``)."""

    minimum: int = 1
    optional: bool = False

    def check(self, value, name):
        if value is None and self.optional:
            return
        check_positive_int(value, name, minimum=self.minimum)


@dataclass(frozen=True)
class Real:
    """A finite float ``> 0`` (``>= 0`` with ``allow_zero``)."""

    allow_zero: bool = False

    def check(self, value, name):
        check_positive_float(value, name, allow_zero=self.allow_zero)


class OneOf:
    """One of the given strings."""

    def __init__(self, *options):
        self.options = options

    def check(self, value, name):
        if value not in self.options:
            quoted = [repr(o) for o in self.options]
            listed = quoted[0] if len(quoted) == 1 else (
                ", ".join(quoted[:-1]) + " or " + quoted[-1])
            raise ValueError(f"{name} must be {listed}; got {value!r}")


class DriverFitMixin:
    """``fit`` with checkpoint/resume and declared parameter validation (see the module)."""

    #: hyper-parameter name -> constraint (:class:`Integer`, :class:`Real`, :class:`OneOf`),
    #: checked in this order by :meth:`_validate_parameters`.
    _parameter_checks: dict = {}
    #: the ``inference`` whose engine runs under the fit driver: the one that takes
    #: ``callback``, ``checkpoint_path`` and ``resume_from``.
    _driver_inference: str = ""
    #: what the family's degenerate optimum is, for the warning of :meth:`_report_restarts`
    _degenerate_optimum: str = ""

    def fit(self, X, y=None, resume_from=None):
        """Fit on base clusterings ``X`` (N, M); ``resume_from``: a checkpoint file.

        ``resume_from`` continues the run saved there by ``checkpoint_path`` (same data and
        hyper-parameters, else ValueError) and ends exactly where the uninterrupted run
        ends.
        """
        ens = as_ensemble(X)
        self.ensemble_ = ens
        self.n_features_in_ = ens.n_partitions
        self._fit(ens, resume=self._read_resume(resume_from, ens))
        return self

    def _read_resume(self, resume_from, ens, extra_digest=""):
        """The snapshot saved in checkpoint ``resume_from`` (None: start afresh), checked
        against ``ens`` (and ``extra_digest``: side data such as GBCE's features)."""
        if resume_from is None:
            return None
        if self.inference != self._driver_inference:
            raise ValueError(f"resume_from needs inference={self._driver_inference!r}")
        return read_checkpoint(resume_from, self, ens, extra_digest)

    def _validate_parameters(self):
        """Check every declared constraint (:attr:`_parameter_checks`)."""
        for name, constraint in self._parameter_checks.items():
            constraint.check(getattr(self, name), name)

    def _check_driver_options(self):
        """``callback``, ``checkpoint_path``, ``checkpoint_every`` valid, and the first two
        asked only of the driven engine."""
        check_checkpoint_params(self)
        if self.inference != self._driver_inference and (
            self.callback is not None or self.checkpoint_path is not None
        ):
            raise ValueError(
                f"callback and checkpoint_path need inference={self._driver_inference!r}")

    def _drive(self, engine, ensemble, rs, resume=None, digest=""):
        """``n_init`` restarts of ``engine`` under the fit driver (callback, checkpoints)."""
        return drive(engine, max_iter=self.max_iter, n_runs=self.n_init, tol=self.tol, rng=rs,
                     callback=self.callback,
                     checkpoint=checkpoint_writer(self, ensemble, digest),
                     checkpoint_every=self.checkpoint_every, resume=resume,
                     progress=bool(self.verbose), desc=type(self).__name__,
                     run_name="restart")

    def _report_restarts(self, fit, K):
        """``degenerate_``, ``n_degenerate_``, ``n_higher_bound_skipped_``, with warnings.

        The driver keeps the best non-degenerate restart; a degenerate restart with a
        higher bound passed over for it is counted and reported, not silently dropped.
        """
        best = fit.best
        self.n_degenerate_ = int(fit.n_degenerate)
        self.degenerate_ = bool(fit.all_degenerate)
        self.n_higher_bound_skipped_ = sum(
            r is not best and r.degenerate and r.objective > best.objective for r in fit.runs)
        name = type(self).__name__
        if self.degenerate_:
            warnings.warn(
                f"every {name} restart ran into the degenerate optimum "
                f"({self._degenerate_optimum}); "
                "returning the best bound. " + degenerate_advice(self.init, self.n_init, K),
                RuntimeWarning, stacklevel=5)
        elif self.n_higher_bound_skipped_:
            warnings.warn(
                f"{name} kept a non-degenerate restart over {self.n_higher_bound_skipped_} "
                "degenerate restart(s) with a higher bound (the bound favours the degenerate "
                "optimum; see n_higher_bound_skipped_)", RuntimeWarning, stacklevel=5)
