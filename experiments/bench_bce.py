"""Benchmark: BCE variational EM against its previous kernel and scikit-learn's LDA.

Everything runs in this one process on the same synthetic ensembles (rows drawn
from the BCE generative process: M = 20 base clusterings, k_j = 5 labels, K = 4).
Times are CPU seconds (``time.process_time``, all threads of the process) beside
wall seconds; every figure is the median of ``--repeats`` runs, and the ratios
(measured side by side, interleaved) are what count on a shared machine.

Sections (``--only`` picks some):

``kernel``
    One EM iteration at N = 1e6 (float32, 5 inner passes): E-step, beta and alpha
    updates and the bound, as ``variational_em`` does it, on 1 and 2 threads;
    against a previous kernel (``git show REV:consensuskit/models/bce/kernels.py``,
    REV = ``--baseline-rev``, default 2e4de80, the per-K kernel with tiles of 8 rows;
    fe4faf2 gives the per-row kernel with the separate torch passes for alpha's
    statistic and the bound that went with it), 1 thread.  Prints the largest relative
    difference of the outputs (gamma, beta statistics, the entropy term, the bound,
    alpha's statistic) and the goals (<= 0.5 s CPU on 1 thread, <= 0.3 s wall on 2).
``lda``
    N = 1e5, equal iterations: one BCE EM iteration (1 thread) against one EM step
    of scikit-learn's ``LatentDirichletAllocation`` (batch, ``max_doc_update_iter=5``,
    its private ``_em_step``, without the perplexity pass its ``fit`` adds at the
    end), and fit to fit (BCE float32, ``n_init=1``, random init, ``inner_iter=5``).
``defaults``
    ``BCE(n_clusters=4, max_iter=10, tol=0)`` -- otherwise defaults: float64,
    ``n_init=3``, k-means init -- against ``LatentDirichletAllocation(n_components=4,
    max_iter=10)`` with its defaults, fit to fit at N = 2e4 and 1e5, and where BCE's
    time goes (k-means init, E-step kernel, the rest).
``scaling``
    CPU (and wall) seconds per iteration of BCE (EM), MM (EM) and NBCE (a Gibbs sweep
    with NBCE's defaults -- 20 split-merge proposals per sweep, alpha0 and beta
    sampled, truncation 20 -- and with 2 proposals) at N = 1e4, 1e5, 1e6 and the
    log-log slope: a fit of ``--scaling-iters`` iterations minus a fit of one, divided
    by the difference in iterations, median over at least ``--repeats`` back-to-back
    pairs and ``--scaling-seconds`` of CPU.  NBCE runs on planted data (the same 5
    clusters at every N), its chain started at the planted partition so that every N
    is timed at the same occupancy (printed); ``--nbce-start random`` times the
    estimator from its random start instead, after ``--nbce-warm`` untimed sweeps.

LDA is the natural peer: BCE with K clusters is LDA on the "documents" formed by
each row's one-hot labels, except that BCE keeps one label distribution per base
clustering; the E-steps cost the same.

Usage::

    python experiments/bench_bce.py                        # everything
    python experiments/bench_bce.py --only kernel lda --repeats 3
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

from consensuskit.data.ensemble import Ensemble
from consensuskit.models.bce import cavi, initialise

ROOT = Path(__file__).resolve().parents[1]


def synthetic(N, M=20, K=4, k=5, seed=0):
    """Labels from the BCE generative process (alpha = 0.3, beta rows ~ Dirichlet(0.5))."""
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.full(K, 0.3), size=N)
    cum = np.cumsum(theta, 1)
    X = np.empty((N, M), dtype=np.int64)
    for j in range(M):
        beta = rng.dirichlet(np.full(k, 0.5), size=K)
        z = (rng.random(N)[:, None] > cum).sum(1).clip(max=K - 1)
        X[:, j] = (rng.random(N)[:, None] > np.cumsum(beta[z], 1)).sum(1).clip(max=k - 1)
    return X


def timed(fn):
    """``(cpu seconds, wall seconds, result)`` of ``fn()``."""
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c, time.perf_counter() - w, out


def medians(fns, repeats):
    """Run the callables interleaved ``repeats`` times; median (cpu, wall) of each."""
    rows = [[] for _ in fns]
    for _ in range(repeats):
        for r, fn in zip(rows, fns):
            r.append(timed(fn)[:2])
    return [tuple(np.median(np.asarray(r), 0)) for r in rows]


# ----------------------------------------------------------------------------- kernel
def previous_kernel(rev):
    """The E-step kernel module as it was at git revision ``rev`` (None if unavailable).

    Either the per-row kernel of fe4faf2 (``estep_rows``) or a fused kernel with today's
    entry point (``run_estep``).
    """
    try:
        src = subprocess.run(["git", "show", f"{rev}:consensuskit/models/bce/kernels.py"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    if "def estep_rows" not in src and "def run_estep" not in src:
        return None
    mod = types.ModuleType("bce_kernel_previous")
    mod.__file__ = str(ROOT / "experiments" / "_bce_kernel_previous.py")  # no disk cache
    exec(compile(src.replace("cache=True", "cache=False")
                 .replace('"cache": True', '"cache": False'), mod.__file__, "exec"),
         mod.__dict__)
    return mod


def em_iteration_previous(old, alpha, beta, data, gamma, n_iter, smoothing=1e-6):
    """One EM iteration as before: previous kernel, transposes, torch passes for the rest
    (fe4faf2), or as now with the previous fused kernel (``run_estep``)."""
    if hasattr(old, "run_estep"):
        return em_iteration(alpha, beta, data, gamma, n_iter, 1, smoothing, old.run_estep)
    K, N = gamma.shape
    L = data.n_total_labels
    idx, mask = data.row_layout()
    betaT = np.ascontiguousarray(cavi.with_missing_column(beta).T.numpy())
    g = np.ascontiguousarray(gamma.T.numpy())
    phisum = np.empty_like(g)
    stats = np.zeros((L + 1, K))
    m = mask if mask is not None else np.zeros((1, 1), dtype=g.dtype)
    part = old.estep_rows(alpha.numpy(), betaT, idx, m, mask is not None, g, n_iter, True,
                          stats, phisum)
    gamma_out = torch.from_numpy(g).T.contiguous()
    phi_sum = torch.from_numpy(phisum).T.contiguous()
    st = torch.from_numpy(stats[:L].T.copy())
    plogp = part + float((st * torch.log(beta.double())).sum())
    st = st.to(beta.dtype)
    beta_new = cavi.update_beta(st, data.offsets, smoothing)
    suff = cavi.elog_dirichlet(gamma_out).sum(1)
    alpha_new, _ = cavi.update_alpha(alpha, suff, N, tol=1e-10, ensure_ascent=True)
    lb = cavi.lower_bound(alpha_new, beta_new, gamma_out, phi_sum, st, plogp,
                          smoothing=smoothing)
    return gamma_out, st, plogp, lb, suff


def em_iteration(alpha, beta, data, gamma, n_iter, n_jobs, smoothing=1e-6, run_estep=None):
    """One EM iteration as ``variational_em`` does it now (``run_estep``: another kernel)."""
    N = gamma.shape[1]
    gamma_out, phi_sum, st, plogp, _, terms = cavi._e_step_numba(
        alpha, beta, data, gamma, n_iter, True, n_jobs, run_estep=run_estep)
    beta_new = cavi.update_beta(st, data.offsets, smoothing)
    alpha_new, _ = cavi.update_alpha(alpha, terms.suff.to(alpha), N, tol=1e-10,
                                     ensure_ascent=True)
    lb = cavi.lower_bound(alpha_new, beta_new, gamma_out, phi_sum, st, plogp,
                          smoothing=smoothing, terms=terms)
    return gamma_out, st, plogp, lb, terms.suff


def rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-30)))


def bench_kernel(a):
    N, K = a.kernel_n, 4
    print(f"\n[kernel] one EM iteration, N={N:.0e}, M=20, K={K}, k_j=5, 5 inner passes, "
          "float32")
    ens = Ensemble.from_labels(synthetic(N))
    dt = torch.float32
    data = ens.label_data(dtype=dt)
    data.row_layout()
    # a state after a few iterations, not the flat start
    beta0 = initialise.init_beta_random(ens, K, 0)
    res = cavi.variational_em(data, K, beta0, max_iter=3, tol=0.0, n_jobs=2).params
    alpha, beta, gamma = res.alpha, res.beta, res.gamma
    old = previous_kernel(a.baseline_rev)
    new1 = lambda: em_iteration(alpha, beta, data, gamma, 5, 1)  # noqa: E731
    new2 = lambda: em_iteration(alpha, beta, data, gamma, 5, 2)  # noqa: E731
    fns = [new1, new2]
    if old is not None:
        prev = lambda: em_iteration_previous(old, alpha, beta, data, gamma, 5)  # noqa: E731
        prev()  # compile
        fns.append(prev)
    new1()
    new2()
    t = medians(fns, a.repeats)
    print(f"  this kernel, 1 thread : {t[0][0]:.3f} s CPU, {t[0][1]:.3f} s wall per iteration")
    print(f"  this kernel, 2 threads: {t[1][0]:.3f} s CPU, {t[1][1]:.3f} s wall per iteration")
    print(f"  goals: <= 0.5 s CPU on 1 thread ({'met' if t[0][0] <= 0.5 else 'NOT met'}), "
          f"<= 0.3 s wall on 2 ({'met' if t[1][1] <= 0.3 else 'NOT met'})")
    if old is None:
        print(f"  previous kernel ({a.baseline_rev}) not available (needs git)")
        return
    print(f"  previous ({a.baseline_rev}), 1 thread: {t[2][0]:.3f} s CPU, {t[2][1]:.3f} s wall")
    print(f"  ratio previous/this, CPU (1 thread): {t[2][0] / t[0][0]:.2f}x;  wall 1 -> 2 "
          f"threads: {t[0][1] / t[1][1]:.2f}x")
    o, n = prev(), new1()
    print(f"  largest relative difference to the previous kernel: gamma {rel(n[0], o[0]):.1e}, "
          f"beta statistics {rel(n[1], o[1]):.1e}, entropy term {rel(n[2], o[2]):.1e}, "
          f"bound {rel(n[3], o[3]):.1e}, alpha's statistic {rel(n[4], o[4]):.1e}")


# ----------------------------------------------------------------------------- lda
def lda_em_steps(B, K, iters):
    """A callable running ``iters`` ``_em_step`` of batch LDA (5 document passes each)."""
    from sklearn.decomposition import LatentDirichletAllocation

    lda = LatentDirichletAllocation(n_components=K, learning_method="batch",
                                    max_doc_update_iter=5, mean_change_tol=0.0, n_jobs=1,
                                    random_state=0)
    lda._init_latent_vars(B.shape[1], dtype=np.float64)

    def step():
        for _ in range(iters):
            lda._em_step(B, total_samples=B.shape[0], batch_update=True, parallel=None)

    return step


def bench_lda(a):
    from sklearn.decomposition import LatentDirichletAllocation

    N, K, it = a.lda_n, 4, a.iters
    print(f"\n[lda] BCE vs scikit-learn LDA (batch), N={N:.0e}, {it} iterations, "
          "5 inner passes, 1 thread")
    ens = Ensemble.from_labels(synthetic(N))
    B = ens.onehot(dtype=np.float64)
    data = ens.label_data(dtype=torch.float32)
    beta0 = initialise.init_beta_random(ens, K, 0)
    cavi.variational_em(data, K, beta0, max_iter=1, tol=0.0, n_jobs=1)  # compile / load

    def ours_em():
        return cavi.variational_em(data, K, beta0, max_iter=it, tol=0.0, inner_iter=5,
                                   n_jobs=1)

    (c_ours, w_ours), (c_lda, w_lda) = medians([ours_em, lda_em_steps(B, K, it)],
                                               a.repeats)
    print(f"  EM steps only: BCE {c_ours / it:.4f} s CPU/it, LDA {c_lda / it:.4f} s CPU/it  "
          f"-> {c_lda / c_ours:.1f}x (wall {w_lda / w_ours:.1f}x)")
    from consensuskit import BCE

    def ours_fit():
        return BCE(K, max_iter=it, tol=0, n_init=1, init="random", inner_iter=5,
                   dtype="float32", random_state=0).fit(ens)

    def lda_fit():
        return LatentDirichletAllocation(n_components=K, learning_method="batch",
                                         max_iter=it, max_doc_update_iter=5,
                                         mean_change_tol=0.0, evaluate_every=-1, n_jobs=1,
                                         random_state=0).fit(B)

    (c_of, w_of), (c_lf, w_lf) = medians([ours_fit, lda_fit], a.repeats)
    print(f"  fit to fit:    BCE {c_of:.3f} s CPU, LDA {c_lf:.3f} s CPU  -> {c_lf / c_of:.1f}x "
          f"(wall {w_lf / w_of:.1f}x)")


# ----------------------------------------------------------------------------- defaults
class Attribution:
    """CPU seconds spent inside some functions (``(owner, name)`` pairs) while active."""

    def __init__(self, targets):
        self.targets = targets
        self.seconds = {name: 0.0 for _, name in targets}

    def __enter__(self):
        self.saved = [(owner, name, getattr(owner, name)) for owner, name in self.targets]
        for owner, name, f in self.saved:
            def wrap(*args, _f=f, _n=name, **kw):
                c = time.process_time()
                try:
                    return _f(*args, **kw)
                finally:
                    self.seconds[_n] += time.process_time() - c
            setattr(owner, name, wrap)
        return self

    def __exit__(self, *exc):
        for owner, name, f in self.saved:
            setattr(owner, name, f)
        return False


def bench_defaults(a):
    from sklearn.decomposition import LatentDirichletAllocation

    from consensuskit import BCE

    it, K = 10, 4
    print(f"\n[defaults] BCE(n_clusters={K}, max_iter={it}, tol=0) (float64, n_init=3, "
          f"k-means init) vs LDA(n_components={K}, max_iter={it}) defaults, fit to fit, "
          "1 thread")
    BCE(K, max_iter=1, n_init=1).fit(synthetic(300))  # compile / load
    for N in a.default_sizes:
        X = synthetic(N)
        ens = Ensemble.from_labels(X)
        B = ens.onehot(dtype=np.float64)

        def ours(ens=ens):
            return BCE(K, max_iter=it, tol=0, random_state=0).fit(ens)

        def lda(B=B):
            return LatentDirichletAllocation(n_components=K, max_iter=it, n_jobs=1,
                                             random_state=0).fit(B)

        (c_o, w_o), (c_l, w_l) = medians([ours, lda], a.repeats)
        with Attribution([(initialise, "init_beta_kmeans"), (cavi, "e_step"),
                          (cavi.CAVI, "step")]) as att:
            c_once, _, m = timed(ours)
        s = att.seconds
        rest = c_once - s["init_beta_kmeans"] - s["step"]
        print(f"  N={N:.0e}: BCE {c_o:.3f} s CPU ({m.n_iter_} it x {m.n_init} restarts), "
              f"LDA {c_l:.3f} s CPU ({it} it) -> {c_l / c_o:.1f}x (wall {w_l / w_o:.1f}x)")
        print(f"           BCE's time: k-means init {s['init_beta_kmeans']:.3f} s, E-step "
              f"{s['e_step']:.3f} s, rest of EM {s['step'] - s['e_step']:.3f} s, "
              f"driver, data and result {rest:.3f} s (one run, {c_once:.3f} s)")


# ----------------------------------------------------------------------------- scaling
def planted(N, M=20, k=5, n_clusters=5, noise=0.2, seed=0):
    """``(truth, X)``: noisy copies of a planted partition, ``n_clusters`` clusters of
    equal size in random order, each label replaced by a uniform one with probability
    ``noise``.  Rows are independent given the partition, so the first ``n`` rows of
    one such ensemble have the same cluster structure for every ``n``."""
    from consensuskit.data.generate import noisy_copies

    truth = np.random.default_rng(seed).permutation(np.arange(N) % n_clusters)
    return truth, noisy_copies(truth, M, noise=noise, n_labels=k, random_state=seed)


class PlantedStartNBCE:
    """NBCE's Gibbs sampler with the estimator's defaults (truncation, prior, alpha0 and
    beta sampled from their starting values, split-merge schedule) on one chain, started
    at the planted partition ``truth[:N]`` instead of a random one, so every N is timed
    at the same occupancy.  Quacks like the estimator for :func:`_per_iteration`."""

    def __init__(self, truth, burn_in, **kw):
        self.truth, self.burn_in, self.kw = truth, burn_in, kw
        self.n_samples = 1

    def set_params(self, burn_in):
        self.burn_in = burn_in
        return self

    def fit(self, ens):
        from consensuskit import NBCE
        from consensuskit.models.nbce.gibbs import gibbs_nbce

        d = NBCE()
        out = gibbs_nbce(ens.offset_index(), ens.n_labels, d.truncation, prior=d.prior,
                         alpha0=d.alpha0, beta=d.beta, update_hyperparameters=d.update_hyper,
                         n_samples=1, burn_in=self.burn_in, n_chains=1, n_jobs=1,
                         init=self.truth[:ens.n_samples], random_state=0, **self.kw)
        self.n_clusters_draws_ = out["n_occupied"]
        return self


def bench_scaling(a):
    from consensuskit import BCE, MM, NBCE

    its, warm = a.scaling_iters, a.nbce_warm
    sizes = a.scaling_sizes
    nbce_rows = "NBCE" in a.scaling_models
    truth, X_planted = planted(max(sizes)) if nbce_rows else (None, None)
    if a.nbce_start == "planted":
        start = ("chains start at the planted partition (the same occupancy at every N); "
                 "sampler with NBCE's defaults")
        nbce = lambda **kw: PlantedStartNBCE(truth, its, **kw)  # noqa: E731
        warm = 0
    else:
        start = (f"NBCE's defaults from its random start; both fits first make {warm} "
                 "sweeps (not timed)")
        nbce = lambda **kw: NBCE(n_samples=1, burn_in=warm + its, n_chains=1,  # noqa: E731
                                 random_state=0, **kw)
    print(f"\n[scaling] CPU s per iteration vs N (M=20, k_j=5), 1 thread; log-log slope\n"
          f"  per iteration = (fit of {its} iterations - fit of 1) / {its - 1}, the two fits "
          f"back to back, median over >= {a.repeats} pairs and >= {a.scaling_seconds} s CPU\n"
          f"  BCE, MM: BCE-process data (K=4).  NBCE (one chain, truncation 20, TSB, "
          f"alpha0/beta sampled): planted data (5 clusters, 20% noise), {start}; "
          f"'occupied' = components of the last draw of each N's last long fit")
    models = {
        "BCE (EM it.)": lambda: BCE(4, max_iter=its, tol=0, n_init=1, init="random",
                                     random_state=0),
        "MM (EM it.)": lambda: MM(4, max_iter=its, tol=0, n_init=1, random_state=0),
        # sweeps counted as burn-in: a retained draw adds a fixed-size point-consensus
        # pass (2e5 sampled pairs) that is not part of a sweep's cost
        "NBCE (default)": nbce,
        "NBCE (2 s-m)": lambda: nbce(n_split_merge=2),
    }
    models = {name: make for name, make in models.items()
              if name.split()[0] in a.scaling_models}
    for name, make in models.items():
        small = Ensemble.from_labels(X_planted[:300] if name.startswith("NBCE")
                                     else synthetic(300))
        make().fit(small)
    table = {name: [] for name in models}
    walls = {name: [] for name in models}
    occupied = {name: [] for name in models if name.startswith("NBCE")}
    for N in sizes:
        data = {}
        if any(not name.startswith("NBCE") for name in models):
            data["bce"] = Ensemble.from_labels(synthetic(N))
        if nbce_rows:
            data["planted"] = Ensemble.from_labels(X_planted[:N])
        for name, make in models.items():
            is_nbce = name.startswith("NBCE")
            t, w, pairs, est = _per_iteration(make, data["planted" if is_nbce else "bce"], its,
                                              a.repeats, a.scaling_seconds,
                                              warm if is_nbce else 0)
            table[name].append(t)
            walls[name].append(w)
            extra = ""
            if is_nbce:
                occupied[name].append(int(est.n_clusters_draws_[0, -1]))
                extra = f", {occupied[name][-1]} occupied"
            print(f"    {name:<14} N={N:.0e}: {t:.5f} s CPU, {w:.5f} s wall per iteration "
                  f"(median of {pairs} pairs{extra})", flush=True)
    print(f"  {'CPU s':<14}" + "".join(f"{f'N={n:.0e}':>12}" for n in sizes) + f"{'slope':>8}")
    for name, ts in table.items():
        slope = np.polyfit(np.log(sizes), np.log(ts), 1)[0]
        print(f"  {name:<14}" + "".join(f"{t:>12.5f}" for t in ts) + f"{slope:>8.2f}")
    print(f"  {'wall s':<14}" + "".join(f"{f'N={n:.0e}':>12}" for n in sizes) + f"{'slope':>8}")
    for name, ws in walls.items():
        slope = np.polyfit(np.log(sizes), np.log(ws), 1)[0]
        print(f"  {name:<14}" + "".join(f"{w:>12.5f}" for w in ws) + f"{slope:>8.2f}")
    if occupied:
        print(f"  {'occupied':<14}" + "".join(f"{f'N={n:.0e}':>12}" for n in sizes))
    for name, occ in occupied.items():
        print(f"  {name:<14}" + "".join(f"{o:>12d}" for o in occ))


def _per_iteration(make, ens, its, repeats, min_seconds, warm=0):
    """CPU and wall seconds per iteration: a fit of ``warm + its`` iterations minus a
    fit of ``warm + 1``; also the number of pairs and the last long fit.

    The difference cancels the per-fit setup (layout, initialisation, result) and the
    ``warm`` iterations.  The two fits run back to back, after a garbage collection, and
    the median is over the per-pair differences, so a burst of load on the shared
    machine spoils one pair rather than biasing one of two medians; pairs repeat until
    there are ``repeats`` of them and they took ``min_seconds`` of CPU (many pairs at
    small N, where one fit lasts milliseconds).
    """
    one = _with_iters(make, warm + 1)
    diffs, spent = [], 0.0
    while len(diffs) < repeats or spent < min_seconds:
        gc.collect()
        c_full, w_full, est = timed(lambda: make().fit(ens))
        gc.collect()
        c_one, w_one, _ = timed(lambda: one().fit(ens))
        diffs.append((c_full - c_one, w_full - w_one))
        spent += c_full + c_one
    cpu, wall = np.maximum(np.median(np.asarray(diffs), 0), 1e-9) / (its - 1)
    return float(cpu), float(wall), len(diffs), est


def _with_iters(make, n):
    def build():
        est = make()
        if hasattr(est, "n_samples") and hasattr(est, "burn_in"):
            est.set_params(burn_in=n)
        else:
            est.set_params(max_iter=n)
        return est
    return build


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", default=["kernel", "lda", "defaults", "scaling"],
                   choices=["kernel", "lda", "defaults", "scaling"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=5, help="EM iterations in [lda]")
    p.add_argument("--kernel-n", type=int, default=1_000_000)
    p.add_argument("--lda-n", type=int, default=100_000)
    p.add_argument("--default-sizes", type=int, nargs="+", default=[20_000, 100_000])
    p.add_argument("--scaling-sizes", type=int, nargs="+",
                   default=[10_000, 100_000, 1_000_000])
    p.add_argument("--scaling-models", nargs="+", default=["BCE", "MM", "NBCE"],
                   choices=["BCE", "MM", "NBCE"], help="rows of [scaling]")
    # 26: at 1e6 rows the per-fit cost (set-up, NBCE's grouping of identical rows,
    # results) varied by more than five iterations' worth between runs, which made
    # the 6-iteration difference mostly noise there
    p.add_argument("--scaling-iters", type=int, default=26,
                   help="iterations of the longer fit in [scaling] (the shorter has one)")
    p.add_argument("--scaling-seconds", type=float, default=2.0,
                   help="least CPU seconds of fit pairs per model and N in [scaling]")
    p.add_argument("--nbce-start", choices=["planted", "random"], default="planted",
                   help="[scaling]: NBCE chains start at the planted partition (matched "
                        "occupancy) or run the estimator from its random start")
    p.add_argument("--nbce-warm", type=int, default=10,
                   help="untimed NBCE sweeps before the timed ones with --nbce-start random")
    p.add_argument("--baseline-rev", default="2e4de80",
                   help="git revision holding the previous E-step kernel")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, torch threads 1; "
          f"CPU seconds = time.process_time (all threads), medians of {a.repeats}")
    for name in a.only:
        globals()[f"bench_{name}"](a)


if __name__ == "__main__":
    main()
