"""Hand-written engines registered as fast paths of their Pyro spec.

Each entry names a model family and an engine (``("bce", "cavi")``), the spec module in
:mod:`consensuskit.models`, how to build the estimator that runs the engine, and how to
read the engine's *fitted* state as values of the spec's global sites.  With that, one
generic check holds for every entry (``tests/test_fast_paths.py``): the estimator's
per-row log-likelihood equals the spec's (computed by enumeration and likelihood
weighting in :mod:`consensuskit.inference.pointwise`) within Monte-Carlo error, and where
the engine reports an objective (EM's log joint, CAVI's bound) it equals the spec's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["FastPath", "register_engine", "fast_paths", "spec_globals"]


@dataclass(frozen=True)
class FastPath:
    """One registered engine.

    family, engine : str
    spec : module with ``model`` following the convention of :mod:`consensuskit.models`
    make_estimator : callable(**overrides) -> unfitted estimator that runs the engine
    to_spec : callable(fitted estimator) -> (model_kwargs, draws)
        ``draws``: dict global site -> tensor (D, ...) (D = 1 for a point estimate).
    objective : callable(fitted estimator) -> (engine value, spec value, spec SE) or None
    data : callable() -> (X_train, X_test, fit_kwargs) or None
        The engine's own check data when labels alone do not fit it (GBCE's features go
        in ``fit_kwargs``, passed to ``fit``); None: the check's shared labels-only data.
    """

    family: str
    engine: str
    spec: object
    make_estimator: Callable
    to_spec: Callable
    objective: Callable | None = None
    data: Callable | None = None


_REGISTRY: dict = {}


def register_engine(fast_path: FastPath) -> FastPath:
    """Add ``fast_path`` under ``(family, engine)``; returns it."""
    _REGISTRY[(fast_path.family, fast_path.engine)] = fast_path
    return fast_path


def fast_paths() -> list:
    """Every registered :class:`FastPath` (the built-ins are registered on first call)."""
    if not _REGISTRY:
        _register_builtins()
    return list(_REGISTRY.values())


def spec_globals(est):
    """The spec's global-site values at ``est``'s fitted state (the registered mapping)."""
    fam = type(est).__name__.lower()
    key = (fam, getattr(est, "inference", None) or {"mm": "em"}.get(fam))
    for fp in fast_paths():
        if (fp.family, fp.engine) == key:
            return fp.to_spec(est)
    raise KeyError(f"no fast path registered for {key}")


# ----------------------------------------------------------------- built-ins
def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def _kw(est, **extra):
    ens = est.ensemble_
    return dict(n_labels=[int(k) for k in ens.n_labels], **extra)


def _mm_to_spec(est):
    kw = _kw(est, n_clusters=len(est.weights_), label_prior=float(est.label_prior),
             weight_prior=float(est.weight_prior))
    draws = {"pi": _t(est.weights_)[None]}
    draws.update({f"theta_{j}": _t(t)[None] for j, t in enumerate(est.theta_)})
    return kw, draws


def _mm_objective(est):
    from consensuskit.models.mm import spec as mm

    kw, draws = _mm_to_spec(est)
    lj, _ = mm.log_joint(torch.as_tensor(est.ensemble_.codes), draws["pi"][0],
                         [draws[f"theta_{j}"][0] for j in range(len(est.theta_))], **kw)
    return float(est.lower_bound_), lj, 0.0


def _bce_to_spec(est):
    kw = _kw(est, n_clusters=len(est.alpha_))
    draws = {"alpha": _t(est.alpha_)[None]}
    draws.update({f"beta_{j}": _t(b)[None] for j, b in enumerate(est.beta_)})
    return kw, draws


def _bce_objective(est, n_particles=2000, reps=4):
    """CAVI's reported bound vs the spec's ELBO under the paper's mean-field guide at the
    fitted (alpha, beta, gamma) and phi from one more phi-update at the fitted gamma."""
    import pyro
    from pyro.infer import TraceEnum_ELBO, config_enumerate

    from consensuskit.models.bce import cavi
    from consensuskit.models.bce import spec as bce

    ens = est.ensemble_
    data = cavi.prepare_data(ens)
    alpha = _t(est.alpha_)
    beta_packed = cavi.pack_beta(est.beta_)
    gamma = _t(est.gamma_)  # (N, K)
    phik = cavi.update_phi(cavi.elog_dirichlet(gamma.T), beta_packed, data.idx, data.mask)
    phi = phik.permute(0, 2, 1)  # (M, N, K)
    loss = TraceEnum_ELBO(num_particles=n_particles, vectorize_particles=True,
                          max_plate_nesting=2)
    guide = config_enumerate(bce.guide_meanfield, "parallel")
    labels = torch.as_tensor(ens.codes)
    kw = dict(n_labels=list(ens.n_labels), n_clusters=len(est.alpha_), alpha=alpha,
              beta=[_t(b) for b in est.beta_], gamma=gamma, phi=phi)
    with torch.random.fork_rng():
        pyro.set_rng_seed(0)
        vals = [-loss.loss(bce.model, guide, labels, **kw) for _ in range(reps)]
    smooth = est.smoothing * sum(float(np.log(b).sum()) for b in est.beta_)
    # the engine's objective is the ELBO plus the smoothing pseudo-count term
    return (float(est.lower_bound_) - smooth, float(np.mean(vals)),
            float(np.std(vals, ddof=1) / np.sqrt(reps)))


def _gbce_data():
    """90 + 30 rows of GBCE's own data (labels and 2 features from its spec, alpha 0.2,
    label distributions from Dirichlet(0.5)), 10% of the labels and 5% of the feature
    values missing."""
    from consensuskit.models.gbce import spec as gbce

    n_labels = [3, 3, 4, 2, 3]
    X, F, _ = gbce.simulate(n_rows=120, n_labels=n_labels, n_clusters=3, n_features=2,
                            params={"alpha": np.full(3, 0.2)}, seed=3, label_prior=0.5)
    rs = np.random.default_rng(3)
    X[rs.random(X.shape) < 0.1] = -1
    X[(X < 0).all(1), 0] = 0
    F[rs.random(F.shape) < 0.05] = np.nan
    return X[:90], X[90:], dict(features=F[:90])


def _nbce_point_to_spec(est):
    T = est._log_theta.shape[0]
    kw = _kw(est, n_clusters=T, alpha0=float(est.alpha0), beta=float(est.beta), prior=est.prior)
    pi = np.exp(est._log_pi)
    off = est.ensemble_.offsets
    theta = np.exp(est._log_theta)
    draws = {f"theta_{j}": _t(theta[:, off[j]:off[j + 1]])[None]
             for j in range(len(off) - 1)}
    if est.prior == "fsd":
        draws["pi"] = _t(pi)[None]
    else:  # sticks with stick_breaking(v) = pi
        rest = 1.0 - np.concatenate([[0.0], np.cumsum(pi)[:-1]])
        draws["v"] = _t(np.clip(pi[:-1] / rest[:-1], 1e-300, 1.0))[None]
    return kw, draws


def _nbce_gibbs_to_spec(est):
    lp, lt = est._draw_parameters(slice(None))  # (D, T), (D, T, L): every draw
    off = est.ensemble_.offsets
    draws = {"pi": _t(np.exp(lp))}
    draws.update({f"theta_{j}": _t(np.exp(lt[:, :, off[j]:off[j + 1]]))
                  for j in range(len(off) - 1)})
    kw = _kw(est, n_clusters=lp.shape[1], prior="fsd")  # pi given directly: FSD scores it
    return kw, draws


def _register_builtins():
    from consensuskit.models.bce import spec as bce
    from consensuskit.models.bce.estimator import BCE
    from consensuskit.models.gbce import spec as gbce
    from consensuskit.models.gbce.estimator import GBCE
    from consensuskit.models.mm import spec as mm
    from consensuskit.models.mm.estimator import MM
    from consensuskit.models.nbce import spec as nbce
    from consensuskit.models.nbce.estimator import NBCE

    register_engine(FastPath("mm", "em", mm,
                             lambda **o: MM(n_clusters=3, random_state=0, **o),
                             _mm_to_spec, _mm_objective))
    register_engine(FastPath("mm", "svi", mm,
                             lambda **o: MM(n_clusters=3, inference="svi", max_iter=60,
                                            random_state=0, **o),
                             _mm_to_spec, _mm_objective))
    register_engine(FastPath("bce", "cavi", bce,
                             lambda **o: BCE(n_clusters=3, alpha_estimate="meanfield", n_init=1,
                                             tol=1e-10, max_iter=300, random_state=0, **o),
                             _bce_to_spec, _bce_objective))
    register_engine(FastPath("bce", "svi", bce,
                             lambda **o: BCE(n_clusters=3, inference="svi", max_iter=100,
                                             n_init=1, random_state=0, **o),
                             _bce_to_spec))
    register_engine(FastPath("gbce", "cavi", gbce,
                             lambda **o: GBCE(n_clusters=3, alpha_estimate="meanfield",
                                              label_weight=[2.0, 1, 1, 0.5, 1],
                                              feature_weight=[1.0, 0.5], n_init=1, tol=1e-13,
                                              max_iter=2000, random_state=0, **o),
                             # GBCE scores the labels with the features integrated
                             # out: the spec without features at the fitted alpha, beta
                             _bce_to_spec, data=_gbce_data))
    for prior, engine in (("fsd", "vb"), ("tsb", "cvb")):
        register_engine(FastPath("nbce", f"{engine}-{prior}", nbce,
                                 lambda prior=prior, engine=engine, **o: NBCE(
                                     truncation=6, prior=prior, inference=engine,
                                     random_state=0, **o),
                                 _nbce_point_to_spec))
    register_engine(FastPath("nbce", "gibbs", nbce,
                             lambda **o: NBCE(truncation=6, n_samples=20, burn_in=20,
                                              n_chains=1, random_state=0, **o),
                             _nbce_gibbs_to_spec))
