"""Shared estimator plumbing: input checks, torch device/dtype, perplexity.

Every consensus estimator follows scikit-learn conventions (hyper-parameters
stored untouched in ``__init__``, validated in ``fit``; fitted attributes end in
``_``).  Generative models implement :meth:`GenerativeMixin._log_likelihood` and
inherit ``score`` and ``perplexity`` from it, so that the definition of
perplexity lives in one place.
"""

from __future__ import annotations

import numbers
import weakref

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted

from consensuskit.data.ensemble import Ensemble, as_ensemble

__all__ = [
    "ConsensusEstimator",
    "GenerativeMixin",
    "check_n_clusters",
    "check_positive_int",
    "check_positive_float",
    "degenerate_advice",
    "resolve_device",
    "resolve_dtype",
    "torch_generator",
    "row_argmax",
    "normalised_rows",
    "RowNormalised",
]

#: rows per block of :func:`row_argmax` and :func:`normalised_rows`
ROW_BLOCK = 65536


def row_argmax(a, block_rows: int = ROW_BLOCK) -> np.ndarray:
    """``a.argmax(1)`` (int64, (N,)) of an (N, K) array, a block of rows at a time.

    The fitted ``gamma_``/``membership_`` are transposed views of (K, N) arrays;
    numpy's ``argmax(1)`` on such a view first copies the whole array (0.3 GB at
    N = 1e7, K = 4).  Same result (the first maximum of each row).
    """
    out = np.empty(a.shape[0], dtype=np.int64)
    for start in range(0, a.shape[0], block_rows):
        rows = slice(start, start + block_rows)
        out[rows] = a[rows].argmax(1)
    return out


def normalised_rows(a, block_rows: int = ROW_BLOCK) -> np.ndarray:
    """``a / a.sum(1, keepdims=True)`` of an (N, K) array, a block of rows at a time (no
    (N, 1) temporary; the same values); float64 for integer ``a`` (counts), else ``a``'s
    dtype."""
    out = np.empty(a.shape, dtype=np.float64 if a.dtype.kind in "iub" else a.dtype)
    for start in range(0, a.shape[0], block_rows):
        rows = slice(start, start + block_rows)
        out[rows] = a[rows] / a[rows].sum(1, keepdims=True)
    return out


class RowNormalised:
    """A fitted attribute that is another one (float, or integer counts) normalised over its
    rows, computed on first access and then kept (``membership_ = RowNormalised("gamma_")``).

    The (N, K) array is not formed during ``fit``, so a fit's peak memory does not hold
    it beside what it is computed from (1.6 GB at N = 1e7, K = 4 in float64, issue 27);
    the value is :func:`normalised_rows` of the source as it is when first read, and the
    same array on every later read.  A non-data descriptor: a value assigned to the
    attribute (or restored by :mod:`consensuskit.io.persistence`) is returned as is.
    Absent (AttributeError, so ``hasattr`` and ``check_is_fitted`` say not fitted) while
    the source is absent or None.  Whoever sets the source again (a refit) clears the
    kept value with :meth:`reset`.
    """

    def __init__(self, source: str):
        self.source = source

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        values = obj.__dict__.get(self.source)
        if values is None:
            raise AttributeError(f"{type(obj).__name__!r} object has no attribute "
                                 f"{self.name!r} (not fitted, or no {self.source})")
        out = normalised_rows(values)
        obj.__dict__[self.name] = out
        return out

    def reset(self, obj):
        """Forget ``obj``'s kept value (call where the source is set anew)."""
        obj.__dict__.pop(self.name, None)


def check_positive_int(value, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as int, or raise a ValueError/TypeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return int(value)


def check_positive_float(value, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or >= 0), else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r} ({type(value).__name__})")
    v = float(value)
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}; got {value!r}")
    return v


def check_n_clusters(n_clusters, n_samples: int, name: str = "n_clusters") -> int:
    """Validate a requested number of clusters against the number of samples."""
    k = check_positive_int(n_clusters, name)
    if k > n_samples:
        raise ValueError(f"{name}={k} is more than the number of samples ({n_samples})")
    return k


def degenerate_advice(init: str, n_init: int, n_clusters: int) -> str:
    """What to try when every restart ran into the degenerate optimum (sum(alpha) -> inf).

    That optimum says the rows share no consensus structure at this K: every
    ``theta_i`` collapses onto the prior mean.  The advice names only changes the
    user has not already made (``init='kmeans'`` is suggested only when
    ``init='random'`` was used).
    """
    tips = []
    if init != "kmeans":
        tips.append("init='kmeans' (the default)")
    if n_clusters > 2:
        tips.append(f"fewer clusters than n_clusters={n_clusters}")
    tips.append(f"more restarts than n_init={n_init} or another random_state")
    return ("The base clusterings may share too little structure for a consensus: check "
            "that every column clusters the same rows in the same order (no ID column, no "
            "shuffled rows), or try " + ", ".join(tips) + ", or MM, which has no alpha to "
            "grow.")


def resolve_device(device):
    """Turn ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a torch.device into a torch.device."""
    import torch

    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device must be 'cpu' or 'cuda'; got {device!r}") from None
    else:
        raise TypeError(f"device must be a string or torch.device; got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was requested but CUDA is not available")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda'; got {device!r}")
    return dev


def resolve_dtype(dtype):
    """Accept ``torch.float32/float64``, numpy dtypes or their names."""
    import torch

    table = {
        "float32": torch.float32,
        "float64": torch.float64,
        "float": torch.float32,
        "double": torch.float64,
    }
    if isinstance(dtype, torch.dtype):
        out = dtype
    else:
        try:
            out = table[np.dtype(dtype).name]
        except (TypeError, KeyError):
            out = None
    if out not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be float32 or float64; got {dtype!r}")
    return out


def torch_generator(random_state, device="cpu"):
    """A ``torch.Generator`` seeded from an int / numpy RandomState / None."""
    import torch
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    g = torch.Generator(device=device)
    g.manual_seed(int(rs.randint(0, 2**31 - 1)))
    return g


class ConsensusEstimator(ClusterMixin, BaseEstimator):
    """Base of every consensus function: ``fit(X)`` on base labels, ``labels_``.

    Subclasses implement ``_fit(ensemble)``, which sets ``labels_`` (int, 0..K-1)
    and any other fitted attributes.
    """

    def __sklearn_tags__(self):
        # X is a matrix of integer labels (categorical), -1 or NaN = missing;
        # scikit-learn's estimator checks then feed rounded, shifted integers.
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.allow_nan = True
        tags.input_tags.sparse = False
        return tags

    def fit(self, X, y=None):
        """Fit the consensus on base clusterings ``X`` (array-like or :class:`Ensemble`)."""
        ens = as_ensemble(X)
        self.ensemble_ = ens
        self.n_features_in_ = ens.n_partitions
        self._fit(ens)
        return self

    def fit_predict(self, X, y=None):
        """Fit and return the hard consensus ``labels_``, shape (n_samples,)."""
        return self.fit(X).labels_

    def _fit(self, ensemble: Ensemble):  # pragma: no cover - abstract
        raise NotImplementedError

    def save(self, path, *, allowed=()) -> None:
        """Save this estimator (fitted or not) to ``path`` in a format that cannot run code
        when loaded; ``allowed``: user classes/functions it holds (stored by name).  See
        :mod:`consensuskit.io.persistence`."""
        from consensuskit.io.persistence import save

        save(self, path, allowed=allowed)

    @classmethod
    def load(cls, path, *, trust=False, allowed=()):
        """Load an estimator saved with :meth:`save`; checks format version and class.

        ``trust=True`` reads a file of the old pickle format (it runs the pickle: only for
        files you trust); ``allowed``: the user classes/functions the file names."""
        from consensuskit.io.persistence import load

        return load(path, expected_class=cls, trust=trust, allowed=allowed)

    def encode(self, X, unknown: str = "error") -> Ensemble:
        """Rows ``X`` (n, M) coded in the label space learned in ``fit``, as an
        :class:`Ensemble` (for fold-in and scoring); ``unknown``: a label a column never
        showed in ``fit`` is an error ("error") or missing ("missing")."""
        check_is_fitted(self, "ensemble_")
        if not isinstance(X, Ensemble):
            shape = np.shape(X) if isinstance(X, np.ndarray) else None
            if shape is not None and len(shape) == 2 and shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has {shape[1]} features, but {type(self).__name__} is expecting "
                    f"{self.n_features_in_} features as input (the features are base clusterings)"
                )
        return self.ensemble_.encode(X, unknown=unknown)

    _encode_new = encode  # the name the estimators use internally


#: estimator -> (its labels_ when built, its InferenceData): the cache of
#: ``GenerativeMixin.inference_data_``, outside the estimator's state so that saving,
#: pickling and cloning never carry it; an entry goes with its estimator.
_INFERENCE_DATA = weakref.WeakKeyDictionary()


class GenerativeMixin:
    """``score``, ``score_samples``, ``perplexity`` and ``inference_data_`` for models
    that define a label likelihood.

    Subclasses implement ``_pointwise_log_likelihood(ensemble) -> (log_lik, var)``: per
    row ``i`` of ``ensemble`` (arrays of shape (n,)) the log (predictive) probability of
    its *observed* labels, natural log, and the Monte-Carlo variance of that estimate
    (zeros when computed exactly).  The total is their sum and its standard error
    ``sqrt(sum var)`` (rows are estimated independently).

    Perplexity is ``exp(-total / n_observed)``.  Because each observed label is a
    discrete outcome whose (predictive) probability is at most 1, the true total is
    at most 0 and the perplexity at least 1.  An estimate is returned as computed,
    never clamped: a sampled total may come out slightly positive (perplexity
    slightly below 1) when ``p(X)`` is near 1, within its standard error; a total
    above 0 by more than four standard errors plus float round-off is a bug in the
    engine, and this class raises rather than report it.

    ``inference_data_`` is an :class:`arviz.InferenceData` whose ``log_likelihood`` group
    holds the training rows' log-likelihood per posterior draw (``_log_likelihood_draws``,
    default: the single point estimate) so that ``az.loo`` / ``az.compare`` apply where
    the fit has posterior draws.
    """

    def _pointwise_log_likelihood(self, ensemble: Ensemble):  # pragma: no cover - abstract
        raise NotImplementedError

    def _log_likelihood(self, ensemble: Ensemble):
        """``(total, se)`` over the rows of ``ensemble`` from the per-row values."""
        ll, var = self._pointwise_log_likelihood(ensemble)
        return float(np.sum(ll)), float(np.sqrt(np.sum(var)))

    def score_samples(self, X, unknown: str = "error"):
        """Per-row log-likelihood of the observed labels of ``X``, shape (n,).

        Its sum over rows is the total that :meth:`perplexity` exponentiates.  Rows with
        no observed label score 0.
        """
        ens = X if isinstance(X, Ensemble) and X is getattr(self, "ensemble_", None) else None
        if ens is None:
            ens = self._encode_new(X, unknown=unknown)
        ll, _ = self._pointwise_log_likelihood(ens)
        return np.asarray(ll, dtype=np.float64)

    def score_samples_se(self, X, unknown: str = "error"):
        """``(score_samples(X), its per-row Monte-Carlo standard error)``, each (n,)."""
        ens = X if isinstance(X, Ensemble) and X is getattr(self, "ensemble_", None) else None
        if ens is None:
            ens = self._encode_new(X, unknown=unknown)
        ll, var = self._pointwise_log_likelihood(ens)
        return np.asarray(ll, dtype=np.float64), np.sqrt(np.asarray(var, dtype=np.float64))

    def log_likelihood_draws(self):
        """Training rows' log-likelihood per posterior draw, array (chains, draws, n): one
        draw of a point estimate; a family with posterior draws supplies them by
        overriding ``_log_likelihood_draws``."""
        return self._log_likelihood_draws()

    def _log_likelihood_draws(self):
        """Training rows' pointwise log-likelihood per posterior draw, (chains, draws, n):
        per draw, ``log p(x_i | that draw's global parameters)`` with the row's own local
        latents summed or integrated out (what PSIS-LOO needs).  Default: the single point
        estimate (one chain, one draw: no LOO)."""
        ll, _ = self._pointwise_log_likelihood(self.ensemble_)
        return np.asarray(ll, dtype=np.float64)[None, None]

    def _log_likelihood_kind(self) -> str:
        """What the ``log_likelihood`` group holds (an attribute of that group)."""
        return "point estimate: log p(x_i | fitted parameters); one draw, no LOO"

    def _posterior_for_arviz(self):
        """Posterior draws of the global parameters, site -> (chains, draws, ...)."""
        return getattr(self, "_arviz_posterior", {})

    def _sample_stats_for_arviz(self):
        """Sampler statistics, stat -> (chains, draws) (ArviZ's names); {} for none."""
        return {}

    def _arviz_dims(self) -> dict:
        """Dimension names (beyond chain, draw) of posterior variables; {} for ArviZ's."""
        return {}

    def _arviz_group_attrs(self) -> dict:
        """Attributes of the groups other than ``posterior``, group -> dict."""
        return {}

    def _build_inference_data(self):
        from consensuskit.inference.arviz_adapter import to_inference_data

        ll = self._log_likelihood_draws()
        post = self._posterior_for_arviz()
        extra = self._arviz_group_attrs()
        attrs = {"log_likelihood": {"kind": self._log_likelihood_kind(),
                                    **extra.pop("log_likelihood", {})}, **extra}
        return to_inference_data(post, getattr(self, "_arviz_attrs", None),
                                 log_likelihood={"x": ll},
                                 sample_stats=self._sample_stats_for_arviz() or None,
                                 observed_data={"x": self.ensemble_.codes},
                                 dims=self._arviz_dims(), group_attrs=attrs)

    @property
    def inference_data_(self):
        """ArviZ ``InferenceData`` of the fit, built at the first access and cached.

        Groups: ``posterior`` (every retained draw of every chain where the fit has
        draws, clusters relabelled consistently across draws), ``log_likelihood``
        (variable ``"x"``, dims chain, draw, row: :meth:`_log_likelihood_draws`, its
        ``kind`` attribute says what it holds), ``sample_stats`` (where the sampler has
        statistics), ``observed_data`` (``"x"``: the training codes (N, M), -1 missing).
        The cached object is returned as long as the fit is the same (a refit rebuilds it);
        it is kept outside the estimator's state (not saved, pickled or cloned).
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "labels_")
        cache = _INFERENCE_DATA.get(self)
        if cache is not None and cache[0] is self.labels_:
            return cache[1]
        idata = self._build_inference_data()
        _INFERENCE_DATA[self] = (self.labels_, idata)
        return idata

    def _posterior_predictive_draws(self, rng):
        """Replicated training labels, one per posterior draw: int (chains, draws, N, M),
        -1 where the training label is missing."""
        raise NotImplementedError(
            f"{type(self).__name__} with this engine has no posterior draws to replicate the "
            "data from (a point fit); fit with an engine that samples (NUTS, Gibbs)")

    def add_posterior_predictive(self, random_state=None):
        """Add the ``posterior_predictive`` group to the cached :attr:`inference_data_` (on
        request: it simulates a replicate of the training rows for every draw) and
        return it; a second call returns it unchanged.

        Variable ``"x"``, int (chain, draw, row, clustering): for each posterior draw, the
        training rows' labels simulated from the model at that draw's parameters (and,
        where the model has them, the row's latent assignment of that draw), with -1 where
        the training label is missing; for ``az.plot_ppc`` and posterior predictive checks.
        """
        from sklearn.utils import check_random_state

        from consensuskit.inference.arviz_adapter import add_group

        idata = self.inference_data_
        if "posterior_predictive" in idata.groups():
            return idata
        x = np.asarray(self._posterior_predictive_draws(check_random_state(random_state)))
        x = np.where(self.ensemble_.codes[None, None] >= 0, x, -1)
        return add_group(idata, "posterior_predictive", {"x": x},
                         dims={"x": ["row", "clustering"]})

    def _checked_log_likelihood(self, X, unknown="error"):
        ens = X if isinstance(X, Ensemble) and X is getattr(self, "ensemble_", None) else None
        if ens is None:
            ens = self._encode_new(X, unknown=unknown)
        n_obs = ens.n_observed
        if n_obs == 0:
            raise ValueError("X has no observed label; perplexity is undefined")
        total, se = self._log_likelihood(ens)
        total = float(total)
        if not np.isfinite(total):
            raise FloatingPointError(f"log-likelihood is not finite ({total})")
        if total > 4.0 * float(se) + 1e-9 * max(1.0, abs(total)):
            raise FloatingPointError(
                f"log-likelihood of discrete labels came out positive ({total}, standard "
                f"error {float(se)}); this is a bug in the engine"
            )
        return total, float(se), n_obs

    def score(self, X, y=None):
        """Mean log-likelihood per observed label of ``X`` (higher is better)."""
        total, _, n_obs = self._checked_log_likelihood(X)
        return total / n_obs

    def perplexity(self, X, return_se: bool = False, unknown: str = "error"):
        """``exp(-log p(X) / number of observed labels)``: >= 1 up to Monte Carlo error.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_partitions) or Ensemble
            Training rows or held-out rows, labelled in the same label space as
            the data passed to ``fit``.
        return_se : bool
            Also return the standard error of the perplexity (delta method),
            non-zero only where the log-likelihood is estimated by sampling.
        unknown : {"error", "missing"}
            What to do with a label that a column never showed during fit.
        """
        total, se, n_obs = self._checked_log_likelihood(X, unknown=unknown)
        ppl = float(np.exp(-total / n_obs))
        if return_se:
            return ppl, ppl * se / n_obs
        return ppl
