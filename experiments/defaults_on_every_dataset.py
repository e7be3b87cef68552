"""Every estimator with its defaults on every bundled dataset: does anything break?

A breadth smoke run, not a score table.  For each bundled dataset (rows subsampled to at
most ``--max-rows``, features standardised), three ensemble families (k-means; average,
Ward and single linkage with k-means in turn; k-means on random feature subsets; M = 10,
k drawn per column from 2 to 2K + 1, so many columns hold more than 11 labels and a pair
of columns more than 127 cells), with no and with 30% missing labels, a held-out fifth of
the rows:

* ``--part fits``: every estimator with its defaults (NBCE's Gibbs with short chains,
  ``n_samples=60, burn_in=40, n_chains=2``, both priors; GBCE with the features); checks
  ``labels_``'s shape, that ``membership_`` is finite with rows summing to 1, that
  ``perplexity`` of the held-out rows (``unknown="missing"``) is finite and at least 1,
  and that ``predict`` returns one label per row;
* ``--part paths``: the paths around a fit (k-means and mixed ensembles, 30% missing):
  NBCE's ``partition_posterior_`` (VI point estimate, credible ball, item confidence),
  ``inference_data_`` through ``az.loo``, save/load with the same held-out perplexity;
  ``ck.compare`` of MM, BCE and NBCE(VB); save/load, ``predict_proba`` and
  ``score_samples`` of MM, BCE, GBCE and the consensus functions the first part leaves
  out.

One JSON line per fit: an ``error`` (repr and the line it came from), ``bad`` (failed
checks), the warnings' categories and first words, CPU seconds.  The summary at the end
counts errors and failed checks per estimator.

    python experiments/defaults_on_every_dataset.py --part fits > fits.jsonl
    python experiments/defaults_on_every_dataset.py --part paths > paths.jsonl
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import tempfile
import time
import traceback
import warnings

import numpy as np


def bundled_rows(name, max_rows, seed):
    """``(F, y, test)`` of bundled dataset ``name``: at most ``max_rows`` rows drawn with
    ``RandomState(seed)``, the features standardised with constant columns dropped, the
    classes, and a held-out mask (a fifth of the rows, the same generator's next draws)."""
    from sklearn.preprocessing import StandardScaler

    from consensuskit.data import datasets

    F, y = datasets.load(name)
    F, y = np.asarray(F, dtype=np.float64), np.asarray(y)
    rs = np.random.RandomState(seed)
    if len(y) > max_rows:
        keep = rs.choice(len(y), max_rows, replace=False)
        F, y = F[keep], y[keep]
    F = StandardScaler().fit_transform(F)
    F = F[:, np.isfinite(F).all(0) & (F.std(0) > 0)]
    return F, y, rs.rand(len(y)) < 0.2


def _ensemble(F, family, K, m=10, seed=7):
    from consensuskit.data import generate

    k = (2, 2 * K + 1)
    if family == "kmeans":
        return generate.kmeans_partitions(F, m, n_clusters=k, random_state=seed)
    if family == "rfs":
        return generate.random_feature_partitions(F, m, n_clusters=k, random_state=seed)
    return generate.mixed_partitions(F, m, k, algorithms=("kmeans", "average", "ward", "single"),
                                     random_state=seed)


def _record(row, fn):
    """Run ``fn`` (returning a dict of outputs and a list of failed checks), catching
    errors and warnings; print the row as JSON and return it."""
    t = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out, bad = fn()
            row.update(out)
            row["bad"] = bad
        except Exception as exc:  # the point of the run: report, go on
            row["error"] = repr(exc)[:300]
            row["where"] = traceback.format_exc().strip().splitlines()[-3].strip()[:200]
    row["cpu"] = round(time.process_time() - t, 2)
    row["warnings"] = sorted({f"{w.category.__name__}: {w.message}"[:90] for w in caught})
    print(json.dumps(row), flush=True)
    return row


def _estimators(K):
    import consensuskit as ck

    short = dict(n_samples=60, burn_in=40, n_chains=2, random_state=0)
    return {
        "MM": lambda: ck.MM(K, random_state=0),
        "BCE": lambda: ck.BCE(K, random_state=0),
        "BCE-meanfield": lambda: ck.BCE(K, alpha_estimate="meanfield", random_state=0),
        "GBCE": lambda: ck.GBCE(K, random_state=0),
        "NBCE-vb": lambda: ck.NBCE(prior="fsd", inference="vb", random_state=0),
        "NBCE-cvb": lambda: ck.NBCE(inference="cvb", random_state=0),
        "NBCE-gibbs-tsb": lambda: ck.NBCE(**short),
        "NBCE-gibbs-fsd": lambda: ck.NBCE(prior="fsd", **short),
        "CSPA": lambda: ck.CSPA(K), "HGPA": lambda: ck.HGPA(K), "MCLA": lambda: ck.MCLA(K),
        "EAC": lambda: ck.EAC(K), "HBGF": lambda: ck.HBGF(K),
        "KCC": lambda: ck.KCC(K, random_state=0), "PCC": lambda: ck.PCC(K, random_state=0),
        "MajorityVote": lambda: ck.MajorityVote(),
    }


def _check_fit(make, Xtr, Xte, features, features_test):
    bad, out = [], {}
    est = make()
    kw = {} if features is None else {"features": features}
    est.fit(Xtr, **kw)
    labels = np.asarray(est.labels_)
    out["n_clusters"] = int(np.unique(labels).size)
    if labels.shape != (Xtr.shape[0],):
        bad.append(f"labels_ shape {labels.shape}")
    if hasattr(est, "membership_"):
        m = np.asarray(est.membership_)
        if not np.isfinite(m).all():
            bad.append("membership_ not finite")
        elif np.abs(m.sum(1) - 1).max() > 1e-6:
            bad.append("membership_ rows do not sum to 1")
    if hasattr(est, "perplexity") and hasattr(est, "score_samples"):
        p = float(est.perplexity(Xte, unknown="missing"))
        out["perplexity"] = round(p, 4)
        if not (np.isfinite(p) and p >= 1):
            bad.append(f"perplexity {p}")
    if hasattr(est, "predict"):
        pkw = {} if features_test is None else {"features": features_test}
        pred = np.asarray(est.predict(Xte, unknown="missing", **pkw))
        if pred.shape != (Xte.shape[0],):
            bad.append(f"predict shape {pred.shape}")
    return out, bad


def part_fits(names, max_rows):
    from consensuskit.data import generate

    rows = []
    for name in names:
        F, y, test = bundled_rows(name, max_rows, seed=3)
        K = int(np.unique(y).size)
        for family in ("kmeans", "mixed", "rfs"):
            X = _ensemble(F, family, K)
            for missing in (0.0, 0.3):
                Xm = generate.drop_labels(X, missing, random_state=1) if missing else X
                for tag, make in _estimators(K).items():
                    feats = (F[~test], F[test]) if tag == "GBCE" else (None, None)
                    rows.append(_record(
                        {"data": name, "family": family, "missing": missing, "estimator": tag},
                        functools.partial(_check_fit, make, Xm[~test], Xm[test], *feats)))
    return rows


def part_paths(names, max_rows):
    from consensuskit.data import generate

    tmp = tempfile.mkdtemp()
    rows = []
    for name in names:
        F, y, test = bundled_rows(name, max_rows, seed=5)
        K = int(np.unique(y).size)
        for family in ("kmeans", "mixed"):
            X = generate.drop_labels(_ensemble(F, family, K, m=8, seed=9), 0.3, random_state=2)
            rows += _paths_cell({"data": name, "family": family}, K, X[~test], X[test],
                                F[~test], F[test], tmp)
    return rows


def _paths_cell(base, K, Xtr, Xte, Ftr, Fte, tmp):
    """The paths around a fit on one ensemble (see the module docstring)."""
    import arviz as az

    import consensuskit as ck

    def nbce_posterior():
        est = ck.NBCE(n_samples=60, burn_in=40, random_state=0).fit(Xtr)
        pp = est.partition_posterior_
        labels, _ = pp.point_estimate(loss="vi", max_draws=100, random_state=0)
        pp.credible_ball(labels, level=0.95)
        bad = [] if np.isfinite(pp.item_confidence(labels)).all() else [
            "item confidence not finite"]
        loo = az.loo(est.inference_data_, pointwise=True)
        path = os.path.join(tmp, "nbce.ck")
        est.save(path)
        back = ck.NBCE.load(path)
        p, q = (e.perplexity(Xte, unknown="missing") for e in (est, back))
        if not np.array_equal(back.labels_, est.labels_) or not np.isclose(p, q):
            bad.append("save/load changed the fit")
        return {"k_hat": int(labels.max() + 1), "elpd_loo": round(float(loo.elpd_loo), 2),
                "perplexity": round(float(p), 4)}, bad

    def comparison():
        table = ck.compare({"MM": ck.MM(K, random_state=0), "BCE": ck.BCE(K, random_state=0),
                            "NBCE-vb": ck.NBCE(prior="fsd", inference="vb", random_state=0)},
                           Xtr, Xte, unknown="missing")
        ppl = table["heldout_perplexity"]
        bad = [] if np.isfinite(ppl).all() else ["non-finite perplexity"]
        return {"perplexity": {k: round(float(v), 4) for k, v in ppl.items()}}, bad

    def roundtrip(make, features=False):
        est = make()
        est.fit(Xtr, **({"features": Ftr} if features else {}))
        path = os.path.join(tmp, type(est).__name__ + ".ck")
        est.save(path)
        back = type(est).load(path)
        bad = [] if np.array_equal(est.labels_, back.labels_) else ["labels changed"]
        if hasattr(est, "predict_proba"):
            pkw = {"features": Fte} if features else {}
            a = est.predict_proba(Xte, unknown="missing", **pkw)
            b = back.predict_proba(Xte, unknown="missing", **pkw)
            if not (np.isfinite(a).all() and np.allclose(a.sum(1), 1)):
                bad.append("predict_proba not a distribution")
            if not np.allclose(a, b):
                bad.append("predict_proba changed by save/load")
        if hasattr(est, "score_samples"):
            if not np.isfinite(est.score_samples(Xte, unknown="missing")).all():
                bad.append("score_samples not finite")
        return {"n_clusters": int(np.unique(est.labels_).size)}, bad

    makers = {
        "MM": lambda: ck.MM(K, random_state=0), "BCE": lambda: ck.BCE(K, random_state=0),
        "QMI": lambda: ck.QMI(K, random_state=0), "IVC": lambda: ck.IVC(K, random_state=0),
        "IPVC": lambda: ck.IPVC(K, random_state=0),
        "MedoidConsensus": lambda: ck.MedoidConsensus(K),
        "LeastSquaresConsensus": lambda: ck.LeastSquaresConsensus(K, random_state=0),
        "PartitionConsensus": lambda: ck.PartitionConsensus(missing="singletons",
                                                            random_state=0),
        "ResamplingConsensus": lambda: ck.ResamplingConsensus(
            n_resamples=10, k_range=(2, K + 2), random_state=0),
    }
    rows = [_record(dict(base, what="NBCE posterior"), nbce_posterior),
            _record(dict(base, what="compare"), comparison)]
    for what, make in makers.items():
        rows.append(_record(dict(base, what=what), functools.partial(roundtrip, make)))
    rows.append(_record(dict(base, what="GBCE"), functools.partial(
        roundtrip, lambda: ck.GBCE(K, random_state=0), features=True)))
    return rows


def summary(rows, key):
    errors, bad, n = collections.Counter(), collections.Counter(), collections.Counter()
    for r in rows:
        n[r[key]] += 1
        errors[r[key]] += "error" in r
        bad[r[key]] += bool(r.get("bad"))
    print(f"# {len(rows)} runs; errors {sum(errors.values())}, failed checks "
          f"{sum(bad.values())}")
    for k in sorted(n):
        if errors[k] or bad[k]:
            print(f"#   {k}: {errors[k]} errors, {bad[k]} failed checks in {n[k]} runs")


def main(argv=None):
    from consensuskit.data import datasets

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("fits", "paths"), default="fits")
    p.add_argument("--datasets", nargs="*", default=None, help="default: every bundled one")
    p.add_argument("--max-rows", type=int, default=None,
                   help="rows per dataset (default 400 for fits, 300 for paths)")
    args = p.parse_args(argv)
    names = args.datasets or datasets.names()
    if args.part == "fits":
        summary(part_fits(names, args.max_rows or 400), "estimator")
    else:
        summary(part_paths(names, args.max_rows or 300), "what")


if __name__ == "__main__":
    main()
