"""Save/load of every fitted estimator, and resumable long runs (issue 7, item 5).

* ``save``/``load`` round-trips every estimator: after loading, the fitted
  attributes and every prediction method give identical results.
* BCE and GBCE (variational EM) and NBCE (Gibbs) accept ``callback(state)``
  (``False`` stops the run) and ``checkpoint_path``/``checkpoint_every``; a run
  stopped part-way and resumed with ``fit(..., resume_from=path)`` ends exactly
  where an uninterrupted run with the same seed ends.
"""

import numpy as np
import pytest
from _factories import ESTIMATORS, K_PARAM, make_fast

from consensuskit.data.generate import noisy_copies
from consensuskit.io import persistence


def planted(seed=0, n_per=10, m=6, noise=0.1):
    return noisy_copies(np.repeat(np.arange(3), n_per), m, noise=noise, random_state=seed)


X = planted()
FEATURES = np.random.default_rng(5).normal(size=(X.shape[0], 2)) + np.repeat(
    np.arange(3), 10
)[:, None]


def _kw(name):
    return {K_PARAM[name]: 5 if name == "NBCE" else 3}


@pytest.mark.parametrize("name", ESTIMATORS)
def test_save_load_round_trip(name, tmp_path):
    est = make_fast(name, **_kw(name))
    if name == "GBCE":
        est.fit(X, features=FEATURES)
    else:
        est.fit(X)
    path = tmp_path / f"{name}.ck"
    est.save(path)
    back = type(est).load(path)
    assert type(back) is type(est)
    assert back.get_params().keys() == est.get_params().keys()
    np.testing.assert_array_equal(back.labels_, est.labels_)
    for attr in ("membership_", "lower_bounds_", "alpha_", "weights_"):
        if hasattr(est, attr):
            np.testing.assert_array_equal(np.asarray(getattr(back, attr)),
                                          np.asarray(getattr(est, attr)))
    new = X[:7]
    extra = {"features": FEATURES[:7]} if name == "GBCE" else {}
    for method in ("predict", "predict_proba"):
        if hasattr(est, method):
            np.testing.assert_array_equal(getattr(back, method)(new, **extra),
                                          getattr(est, method)(new, **extra))
    if hasattr(est, "perplexity"):
        assert back.perplexity(new) == est.perplexity(new)
    # a loaded file of another class is refused
    other = "MM" if name != "MM" else "KCC"
    import consensuskit

    with pytest.raises(ValueError, match="not a"):
        getattr(consensuskit, other).load(path)


def test_future_version_refused(tmp_path):
    est = make_fast("MM", n_clusters=3).fit(X)
    path = tmp_path / "m.ck"
    est.save(path)
    data = path.read_bytes().replace(
        f'"format_version": {persistence.FORMAT_VERSION}'.encode(), b'"format_version": 99', 1)
    path.write_bytes(data)
    with pytest.raises(ValueError, match="newer"):
        type(est).load(path)


# ---------------------------------------------------------------- resumable runs
def _fit_engine(name, path=None, stop_at=None, resume=None, seen=None, **kw):
    """Fit ``name``; with ``stop_at`` the callback stops it after that many calls."""
    calls = [0]

    def callback(state):
        calls[0] += 1
        if seen is not None:
            seen.append(state)
        return stop_at is None or calls[0] < stop_at

    params = {"BCE": {"n_clusters": 3, "n_init": 3, "max_iter": 30, "tol": 0.0},
              "GBCE": {"n_clusters": 3, "n_init": 3, "max_iter": 30, "tol": 0.0},
              "NBCE": {"truncation": 5, "n_samples": 6, "burn_in": 4, "thin": 2,
                       "n_chains": 2}}[name]
    import consensuskit

    est = getattr(consensuskit, name)(random_state=3, callback=callback, checkpoint_path=path,
                                      checkpoint_every=4, **params, **kw)
    extra = {"features": FEATURES} if name == "GBCE" else {}
    return est.fit(X, resume_from=resume, **extra)


RESULT_ATTRS = {
    "BCE": ("labels_", "alpha_", "gamma_", "lower_bounds_", "n_iter_"),
    "GBCE": ("labels_", "alpha_", "gamma_", "mu_", "sigma2_", "lower_bounds_", "n_iter_"),
    "NBCE": ("labels_", "membership_", "n_clusters_draws_", "alpha0_", "beta_"),
}


# stop points: first iteration, mid first restart / chain, in the second restart / chain
# (BCE, GBCE: 3 restarts x 30 iterations; NBCE: 2 chains x 16 sweeps, 4 of burn-in)
STOPS = [("BCE", 1), ("BCE", 9), ("BCE", 45), ("GBCE", 1), ("GBCE", 9), ("GBCE", 45),
         ("NBCE", 2), ("NBCE", 9), ("NBCE", 20)]


@pytest.mark.parametrize("name, stop_at", STOPS)
def test_interrupted_and_resumed_equals_uninterrupted(name, stop_at, tmp_path):
    full = _fit_engine(name)
    path = tmp_path / "run.ck"
    if name == "NBCE" and stop_at <= 4:  # still in burn-in: nothing to summarise yet
        with pytest.raises(ValueError, match="before its first retained draw"):
            _fit_engine(name, path=path, stop_at=stop_at)
    else:
        part = _fit_engine(name, path=path, stop_at=stop_at)
        assert part.stopped_
        assert np.unique(part.labels_).size >= 1 and part.labels_.shape == (X.shape[0],)
    assert path.exists()
    resumed = _fit_engine(name, path=tmp_path / "again.ck", resume=path)
    assert not resumed.stopped_
    for attr in RESULT_ATTRS[name]:
        np.testing.assert_array_equal(np.asarray(getattr(resumed, attr)),
                                      np.asarray(getattr(full, attr)), err_msg=attr)
    if name == "NBCE":
        for key in ("z", "log_joint", "alpha0", "beta"):
            np.testing.assert_array_equal(resumed.samples_[key], full.samples_[key])


@pytest.mark.parametrize("name", ["BCE", "GBCE", "NBCE"])
def test_callback_sees_every_step_and_checkpoints_are_written(name, tmp_path):
    seen = []
    path = tmp_path / "run.ck"
    # the restart structure checked below is the variational fit's (BCE's default runs one
    # collapsed Gibbs chain after an audition; tests/test_bce_gibbs.py resumes it)
    kw = {} if name == "NBCE" else {"alpha_estimate": "meanfield"}
    est = _fit_engine(name, path=path, seen=seen, **kw)
    assert not est.stopped_
    steps = [s["iteration"] for s in seen]
    if name == "NBCE":  # sweeps 1..total of each chain
        total = 4 + 6 * 2
        assert steps == list(range(1, total + 1)) * 2
    else:  # iterations 1..n of each restart, n_init restarts
        assert [s["restart"] for s in seen][-1] == 2
        assert steps[0] == 1 and all(b == a + 1 or b == 1 for a, b in zip(steps, steps[1:]))
    assert path.exists()
    state = persistence.load_checkpoint(path, type(est))
    assert state["state"]["iteration"] == steps[(len(steps) // 4) * 4 - 1]


def test_resume_refuses_other_data_or_parameters(tmp_path):
    path = tmp_path / "run.ck"
    _fit_engine("BCE", path=path, stop_at=3)
    import consensuskit

    with pytest.raises(ValueError, match="other data"):
        consensuskit.BCE(n_clusters=3, n_init=3, max_iter=30, tol=0.0, random_state=3).fit(
            X[::-1], resume_from=path)
    with pytest.raises(ValueError, match="hyper-parameters.*n_init"):
        consensuskit.BCE(n_clusters=3, n_init=2, max_iter=30, tol=0.0, random_state=3).fit(
            X, resume_from=path)
    with pytest.raises(ValueError, match="not a NBCE"):
        consensuskit.NBCE(5).fit(X, resume_from=path)
    # a checkpoint is not an estimator file, and the reverse
    with pytest.raises(ValueError, match="holds a checkpoint"):
        consensuskit.BCE.load(path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted"):
        consensuskit.BCE(n_clusters=3, n_init=3, max_iter=30, tol=0.0, random_state=3).fit(
            X, resume_from=path)


def test_checkpoint_of_an_older_layout_is_refused(tmp_path):
    path = tmp_path / "run.ck"
    _fit_engine("BCE", path=path, stop_at=3)
    ck = persistence.load_checkpoint(path)
    ck["state"] = {k: v for k, v in ck["state"].items() if k != "objectives"}
    import consensuskit

    est = consensuskit.BCE(n_clusters=3, n_init=3, max_iter=30, tol=0.0, random_state=3)
    persistence.save_checkpoint(est, ck, path)
    with pytest.raises(ValueError, match="older consensuskit"):
        est.fit(X, resume_from=path)


def test_callback_must_be_callable():
    import consensuskit

    with pytest.raises(TypeError, match="callback must be callable"):
        consensuskit.BCE(n_clusters=3, callback=3).fit(X)
    with pytest.raises(ValueError, match="checkpoint_every"):
        consensuskit.NBCE(5, checkpoint_every=0).fit(X)


def test_nbce_resume_with_fixed_hyperparameters(tmp_path):
    """With update_hyper=False the sampler's float tables are updated incrementally (never
    rebuilt from the counts), so the checkpoint must carry them as they are."""
    full = _fit_engine("NBCE", update_hyper=False)
    path = tmp_path / "run.ck"
    _fit_engine("NBCE", path=path, stop_at=23, update_hyper=False)
    resumed = _fit_engine("NBCE", resume=path, update_hyper=False)
    np.testing.assert_array_equal(resumed.samples_["z"], full.samples_["z"])
    np.testing.assert_array_equal(resumed.samples_["log_joint"], full.samples_["log_joint"])
    np.testing.assert_array_equal(resumed.labels_, full.labels_)
