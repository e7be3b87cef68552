"""Row- and column-distributed BCE on torch.distributed (gloo, localhost workers).

What is shown:

* the exact row-distributed and the column-distributed fits, run by 3 worker
  processes, equal the single-process estimator ``BCE`` from the same
  initialisation (float64, fixed number of iterations) to 1e-8, with one restart and
  with two; the result *is* a fitted ``BCE``: it predicts, scores (perplexity) and
  saves/loads like the single-process one;
* the instrumented communication layer's record shows what travelled: row mode
  only float statistics whose shapes do not depend on N; column mode only
  ``(K, N)`` float row summaries and scalars, the same for every rank whatever
  number of columns it holds -- no integer tensor, no label payload;
* a worker that dies mid-fit makes the others fail with a clear error, well
  within the timeout (no hang).

Workers start from a fork server (first start ~10 s on a loaded 2-core
machine, later ones well under a second); each fit here takes a few seconds.
"""

import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch

from consensuskit import BCE, Ensemble
from consensuskit.data.generate import noisy_copies
from consensuskit.distributed import DistributedFitError, fit_distributed
from consensuskit.distributed.comm import LocalComm, Message
from consensuskit.distributed.common import EMConfig
from consensuskit.distributed.row import fit_rows_exact
from consensuskit.models.bce import cavi, initialise

K = 3
N_ITER = 8
P = 3


def planted(n=90, m=14, k=K, noise=0.15, missing=0.15, seed=0):
    """Labels of ``m`` noisy copies of a planted ``k``-partition, some missing."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, k, size=n)
    X = noisy_copies(truth, m, noise=noise, n_labels=k + np.arange(m) % 3,  # 3..5 labels
                     random_state=seed)
    drop = rng.random(X.shape) < missing
    drop[np.arange(n), rng.integers(0, m, size=n)] = False
    X[drop] = -1
    return X, truth


@pytest.fixture(scope="module")
def data():
    X, truth = planted()
    ref = BCE(K, alpha_estimate="meanfield", n_init=1, random_state=0, max_iter=N_ITER,
              tol=0.0).fit(X)
    return X, truth, ref


def assert_same_fit(fit, ref, tol=1e-8):
    assert isinstance(fit, BCE)
    np.testing.assert_allclose(fit.alpha_, ref.alpha_, rtol=0, atol=tol)
    for b, rb in zip(fit.beta_, ref.beta_):
        np.testing.assert_allclose(b, rb, rtol=0, atol=tol)
    np.testing.assert_allclose(fit.gamma_, ref.gamma_, rtol=0, atol=tol)
    np.testing.assert_array_equal(fit.labels_, ref.labels_)
    assert fit.n_iter_ == ref.n_iter_ == N_ITER
    # The bound is compared relatively (its magnitude is ~400).  In row mode the summed
    # statistics differ from the single-process ones in the last bit; the Newton solver
    # for alpha (ascent-checked) then stops at a slightly different point, so alpha
    # differs by ~2e-9 and the bound by up to ~5e-10 relative (measured).
    np.testing.assert_allclose(fit.lower_bounds_, ref.lower_bounds_, rtol=1e-8, atol=0)
    lb = np.asarray(fit.lower_bounds_)
    assert np.all(np.diff(lb) >= -1e-9 * np.abs(lb[1:])), "the EM objective decreased"


def fit_messages(fit, phase="fit"):
    return [[m for m in log if m.phase == phase] for log in fit.distributed_.messages]


def test_row_exact_equals_single_process_and_sends_only_fixed_size_statistics(data):
    X, _, ref = data
    fit = fit_distributed(X, K, n_workers=P, mode="row", random_state=0, max_iter=N_ITER,
                          tol=0.0, timeout=60)
    rec = fit.distributed_
    assert rec.n_workers == P and len(rec.messages) == P
    assert_same_fit(fit, ref)

    ens = Ensemble.from_labels(X)
    L = ens.n_total_labels
    N = X.shape[0]
    sizes = {len(rows) for rows in rec.assignment}
    for log in rec.messages:
        assert log, "every rank communicates"
        for m in log:
            assert isinstance(m, Message)
            assert "int" not in m.dtype, f"integer payload {m}"
            assert N not in m.shape and not (sizes & set(m.shape)), f"row-sized payload {m}"
            assert m.nbytes <= 8 * K * (L + 1)
    for log in fit_messages(fit):
        names = {(m.name, m.shape) for m in log}
        assert names == {("row/suffstats", (K * (L + 1),)), ("row/bound", (1,))}
        assert len(log) == 2 * N_ITER
    # every rank sends the same bytes, independent of how many rows it holds
    assert len(set(rec.bytes_sent())) == 1
    assert rec.bytes_sent()[0] == N_ITER * 8 * (K * (L + 1) + 1)


def test_column_equals_single_process_and_labels_stay_on_their_rank(data):
    X, _, ref = data
    fit = fit_distributed(X, K, n_workers=P, mode="column", random_state=0,
                          max_iter=N_ITER, tol=0.0, timeout=60)
    assert_same_fit(fit, ref)
    N = X.shape[0]
    rec = fit.distributed_
    n_cols = [len(c) for c in rec.assignment]
    assert sorted(n_cols) == [4, 5, 5] and K not in n_cols  # uneven on purpose
    for r, log in enumerate(rec.messages):
        for m in log:
            assert "int" not in m.dtype, f"integer payload {m}"
            # nothing shaped like this rank's labels (N x its columns) or like any label column
            assert m.shape not in {(N, n_cols[r]), (n_cols[r], N)}
            assert m.shape in {(K, N), (2,), (1,), (N,), ()}, m  # () = barrier
    for r, log in enumerate(fit_messages(fit)):
        sent = [m for m in log if m.role == "send"]
        if r == 0:
            assert {m.name for m in sent} == {"column/gamma", "column/control"}
        else:
            # a client sends one (K, N) phi sum per pass and two scalars per iteration
            per_iter = ["column/phi_sum"] * 5 + ["column/bound_terms"]
            assert [m.name for m in sent] == per_iter * N_ITER
            assert {m.shape for m in sent} == {(K, N), (2,)}
    # a client's traffic does not depend on how many columns it holds
    assert rec.bytes_sent()[1] == rec.bytes_sent()[2]
    assert n_cols[1] != n_cols[2]


@pytest.mark.parametrize("mode", ["row", "column"])
def test_restarts_predict_score_save_load_equal_single_process(data, mode, tmp_path):
    """n_init=2 over 3 workers equals BCE(n_init=2); the returned BCE predicts, scores and
    round-trips through save/load like the single-process estimator."""
    X, _, _ = data
    # random starts, seed 2: the restarts end 1% apart and the second one wins (k-means
    # starts all reach the same optimum, so the pick would be a tie at 1e-12)
    kw = dict(n_init=2, init="random", random_state=2, max_iter=N_ITER, tol=0.0)
    ref = BCE(K, alpha_estimate="meanfield", n_perplexity_samples=100, **kw).fit(X)
    fit = fit_distributed(X, K, n_workers=P, mode=mode, timeout=60, **kw)
    fit.set_params(n_perplexity_samples=100)
    assert_same_fit(fit, ref)
    assert fit.n_degenerate_ == ref.n_degenerate_ and fit.n_init == 2
    new = X[::7]
    np.testing.assert_allclose(fit.predict_proba(new), ref.predict_proba(new), rtol=0,
                               atol=1e-8)
    np.testing.assert_array_equal(fit.predict(new), ref.predict(new))
    # same parameters to 1e-8 and the same importance-sampling seed: the same estimate
    ppl, se = fit.perplexity(new, return_se=True)
    ppl_ref, se_ref = ref.perplexity(new, return_se=True)
    assert ppl == pytest.approx(ppl_ref, rel=1e-7) and se == pytest.approx(se_ref, rel=1e-5)
    path = tmp_path / "bce.ck"
    fit.save(path)
    back = BCE.load(path)
    np.testing.assert_array_equal(back.predict_proba(new), fit.predict_proba(new))
    assert back.perplexity(new) == fit.perplexity(new)
    assert back.distributed_.mode == mode


def test_row_sequential_heuristic(data):
    X, truth, ref = data
    # one rank: the heuristic is the plain EM (before the final gamma refresh)
    one = fit_distributed(X, K, n_workers=1, mode="row-sequential", random_state=0,
                          max_iter=N_ITER, tol=0.0)
    np.testing.assert_allclose(one.alpha_, ref.alpha_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(one.beta_, 1), np.concatenate(ref.beta_, 1),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(one.lower_bounds_, ref.lower_bounds_, rtol=1e-12)
    fit = fit_distributed(X, K, n_workers=P, mode="row-sequential", random_state=0,
                          max_iter=30, tol=1e-8, timeout=60)
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(truth, fit.labels_) > 0.8
    assert adjusted_rand_score(truth, ref.labels_) > 0.8
    assert 1 <= fit.n_iter_ <= 30 and len(fit.lower_bounds_) == fit.n_iter_
    for log in fit_messages(fit):
        for m in log:
            assert m.dtype == "torch.float64" and X.shape[0] not in m.shape
    for r, log in enumerate(fit_messages(fit)):
        # each rank passes the parameters on once per iteration (rank P-1 by its broadcast
        # of the round's parameters and summed bound)
        sent = [m.name for m in log if m.role == "send"]
        expect = "rowseq/round" if r == P - 1 else "rowseq/params"
        assert sent == [expect] * fit.n_iter_


def test_in_process_single_rank_equals_estimator(data):
    X, _, ref = data
    ens = Ensemble.from_labels(X)
    beta0 = initialise.init_beta_kmeans(ens, K, np.random.RandomState(0))
    comm = LocalComm()
    res, _ = fit_rows_exact(comm, ens.label_data(), EMConfig(K, max_iter=N_ITER, tol=0.0),
                            torch.ones(K, dtype=torch.float64), [torch.as_tensor(beta0)])
    np.testing.assert_allclose(res.best.params.alpha.numpy(), ref.alpha_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.best.objectives, ref.lower_bounds_, rtol=1e-12)
    L = ens.n_total_labels
    assert [(m.name, m.shape) for m in comm.log if m.phase == "fit"] == [
        ("row/suffstats", (K * (L + 1),)), ("row/bound", (1,))] * N_ITER
    assert comm.bytes_sent() == 0  # a world of one sends nothing


@pytest.mark.parametrize("mode", ["row", "column"])
def test_worker_killed_mid_fit_stops_the_others_with_a_clear_error(data, mode):
    X, _, _ = data
    t0 = time.monotonic()
    with pytest.raises(DistributedFitError) as err:
        fit_distributed(X, K, n_workers=P, mode=mode, random_state=0, max_iter=50, tol=0.0,
                        timeout=20, _fault={"rank": 1, "after_iter": 2})
    elapsed = time.monotonic() - t0
    msg = str(err.value)
    assert "rank 1: process exited with code 17" in msg
    # the survivors noticed by themselves: their collective failed, naming the message
    for r in (0, 2):
        assert f"rank {r}: CommError: rank {r}:" in msg, msg
    assert "a peer process has probably died" in msg
    assert elapsed < 60


@pytest.mark.slow
def test_stalled_worker_hits_the_collective_timeout(data):
    X, _, _ = data
    t0 = time.monotonic()
    with pytest.raises(DistributedFitError) as err:
        fit_distributed(X, K, n_workers=P, mode="row", random_state=0, max_iter=50, tol=0.0,
                        timeout=5, _fault={"rank": 2, "after_iter": 1, "action": "hang"})
    msg = str(err.value)
    assert "rank 0: CommError" in msg and "rank 2: still running" in msg
    assert time.monotonic() - t0 < 60


def test_bad_arguments_are_rejected_before_starting_workers(data):
    X, _, _ = data
    with pytest.raises(ValueError, match="mode must be one of"):
        fit_distributed(X, K, mode="diagonal")
    with pytest.raises(ValueError, match="one base clustering per worker"):
        fit_distributed(np.abs(X[:, :2]), K, n_workers=3, mode="column")
    with pytest.raises(ValueError, match="at least one row per worker"):
        fit_distributed(X[:4], 2, n_workers=5, mode="row")
    with pytest.raises(ValueError, match="beta_init must have shape"):
        fit_distributed(X, K, beta_init=np.ones((K, 2)))
    with pytest.raises(ValueError, match="alpha_init"):
        fit_distributed(X, K, alpha_init=[1.0, -1.0, 1.0], n_workers=1)
    with pytest.raises(TypeError, match="n_workers"):
        fit_distributed(X, K, n_workers=2.5)


def test_local_comm_records_messages():
    comm = LocalComm()
    t = torch.zeros(4, 2, dtype=torch.float64)
    comm.all_reduce(t, "a")
    comm.set_phase("fit")
    comm.broadcast(torch.zeros(3, dtype=torch.float32), 0, "b")
    assert [(m.name, m.op, m.shape, m.dtype, m.nbytes, m.phase) for m in comm.log] == [
        ("a", "all_reduce", (4, 2), "torch.float64", 64, "setup"),
        ("b", "broadcast", (3,), "torch.float32", 12, "fit")]
    assert comm.bytes_sent() == 0


def test_torch_comm_requires_a_process_group():
    from consensuskit.distributed.comm import CommError, TorchComm

    with pytest.raises(CommError, match="not initialised"):
        TorchComm()


@pytest.mark.slow
@pytest.mark.parametrize("mode,launcher", [("row", "torchrun"), ("column", "torchrun"),
                                           ("row-sequential", "local")])
def test_command_line(tmp_path, data, mode, launcher):
    import pandas as pd

    X, _, ref = data
    pd.DataFrame(X, columns=[f"bp{j}" for j in range(X.shape[1])]).to_csv(
        tmp_path / "labels.csv", index=False)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    start = ([torchrun, "--standalone", "--nproc-per-node", "3"] if launcher == "torchrun"
             else [sys.executable])
    cmd = start + ["-m", "consensuskit.distributed", "fit", "--mode", mode, "--n-clusters", str(K),
           "--random-state", "0", "--max-iter", "30", "--quiet",
           str(tmp_path / "labels.csv"), "-o", str(tmp_path / "out.csv"),
           "--summary", str(tmp_path / "summary.json")]
    if launcher == "local":
        cmd += ["--workers", "3"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = pd.read_csv(tmp_path / "out.csv")
    assert list(out.columns) == ["label", "p0", "p1", "p2"] and len(out) == X.shape[0]
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(ref.labels_, out["label"]) > 0.8
    import json

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == mode and summary["n_workers"] == 3 and summary["n_iter"] >= 1


# ------------------------------------------------------------------ as the single-process fit
def _stalling_alpha(monkeypatch):
    """Make every Newton solve for alpha report a stall and leave alpha where it was."""
    real = cavi.update_alpha

    def stalling(alpha, suff, n_rows, **kw):
        _, info = real(alpha, suff, n_rows, **kw)
        return alpha, dict(info, stalled=True)

    monkeypatch.setattr(cavi, "update_alpha", stalling)


@pytest.mark.parametrize("mode", ["row", "column", "row-sequential"])
def test_stalled_alpha_steps_counted_and_bound_at_returned_state(data, mode, monkeypatch):
    """``n_alpha_steps_rejected_`` with its warning and ``lower_bound_`` at the returned
    state, as the single-process BCE (workers forked after the patch, so they stall too)."""
    X, _, _ = data
    _stalling_alpha(monkeypatch)
    with pytest.warns(RuntimeWarning, match="Newton solve for alpha"):
        ref = BCE(K, alpha_estimate="meanfield", n_init=1, random_state=0, max_iter=N_ITER,
                  tol=0.0).fit(X)
    with pytest.warns(RuntimeWarning, match="Newton solve for alpha"):
        fit = fit_distributed(X, K, n_workers=P, mode=mode, random_state=0, max_iter=N_ITER,
                              tol=0.0, timeout=60, start_method="fork")
    assert fit.n_alpha_steps_rejected_ == ref.n_alpha_steps_rejected_ == N_ITER
    np.testing.assert_array_equal(fit.alpha_, np.ones(K))
    # lower_bound_ is recomputed at the returned alpha, beta, gamma, not the last
    # iteration's bound (whose phi came before the final M-step)
    ens = Ensemble.from_labels(X)
    at_state = cavi.bound_at(torch.as_tensor(fit.alpha_),
                             torch.as_tensor(np.concatenate(fit.beta_, 1)),
                             torch.as_tensor(fit.gamma_.T), ens.label_data(),
                             smoothing=fit.smoothing)
    assert fit.lower_bound_ == pytest.approx(at_state, rel=1e-12)
    assert abs(fit.lower_bound_ - fit.lower_bounds_[-1]) > 1e-6 * abs(fit.lower_bound_)
    if mode != "row-sequential":  # the exact modes equal the single-process fit
        assert fit.lower_bound_ == pytest.approx(ref.lower_bound_, rel=1e-8)


def test_distributed_normal_fit_reports_no_stalled_alpha_step(data):
    X, _, ref = data
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fit = fit_distributed(X, K, n_workers=P, mode="column", random_state=0,
                              max_iter=N_ITER, tol=0.0, timeout=60)
    assert fit.n_alpha_steps_rejected_ == ref.n_alpha_steps_rejected_ == 0
    assert fit.lower_bound_ == pytest.approx(ref.lower_bound_, rel=1e-8)
    assert abs(ref.lower_bound_ - ref.lower_bounds_[-1]) > 1e-6 * abs(ref.lower_bound_)


# ---------------------------------------------------------------- rendezvous (issue 28)
def _threads(fns):
    """Run ``fns`` in threads; their results or exceptions, in order."""
    import threading

    out = [None] * len(fns)

    def run(i, fn):
        try:
            out[i] = fn()
        except Exception as exc:  # noqa: BLE001 - returned for the test to inspect
            out[i] = exc

    ths = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(30)
    return out


@pytest.fixture
def store_address():
    from consensuskit.distributed import rendezvous

    sock = rendezvous.bind_listener("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = rendezvous.host_store(sock, 3, 10)
    yield "127.0.0.1", port
    del server


def _client(address):
    from consensuskit.distributed import rendezvous

    return rendezvous.connect_store(*address, 10)


def test_store_listens_on_the_address_given_only(store_address):
    import psutil

    port = store_address[1]
    mine = [c for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert [c.laddr.ip for c in mine] == ["127.0.0.1"]


def test_port_in_use_is_a_clear_error(store_address):
    from consensuskit.distributed import rendezvous

    with pytest.raises(rendezvous.RendezvousError, match=f"port {store_address[1]} on "
                       "127.0.0.1 is in use"):
        rendezvous.bind_listener(*store_address)


def test_join_checks_world_size_rank_and_token(store_address):
    from consensuskit.distributed.rendezvous import RendezvousError, join

    # a world of 3 where rank 1 was told the world has 2
    out = _threads([lambda r=r, ws=ws: join(_client(store_address), r, ws, 3.0)
                    for r, ws in [(0, 3), (1, 2), (2, 3)]])
    assert all(isinstance(o, RendezvousError) for o in out), out
    assert any("world-size mismatch" in str(o) for o in out)


@pytest.mark.parametrize("case", ["missing", "duplicate", "token"])
def test_join_names_the_missing_duplicate_or_foreign_rank(case):
    import time as time_mod

    from consensuskit.distributed import rendezvous
    from consensuskit.distributed.rendezvous import RendezvousError, join

    sock = rendezvous.bind_listener("127.0.0.1", 0)
    address = ("127.0.0.1", sock.getsockname()[1])
    server = rendezvous.host_store(sock, 2, 10)
    if case == "missing":
        t0 = time_mod.monotonic()
        with pytest.raises(RendezvousError, match=r"rank\(s\) \[1\] of 2 did not join within 1"):
            join(_client(address), 0, 2, 1.0)
        assert time_mod.monotonic() - t0 < 5
    elif case == "duplicate":
        out = _threads([lambda: join(_client(address), 0, 2, 2.0)] * 2)
        assert any(isinstance(o, RendezvousError) and "rank 0 was already taken" in str(o)
                   for o in out), out
    else:
        out = _threads([lambda: join(_client(address), 0, 2, 3.0, token=b"a" * 32),
                        lambda: join(_client(address), 1, 2, 3.0, token=b"b" * 32)])
        assert all(isinstance(o, RendezvousError) and "does not hold this job's token"
                   in str(o) for o in out), out
    del server


def test_joined_world_passes():
    from consensuskit.distributed import rendezvous
    from consensuskit.distributed.rendezvous import join

    sock = rendezvous.bind_listener("127.0.0.1", 0)
    address = ("127.0.0.1", sock.getsockname()[1])
    server = rendezvous.host_store(sock, 3, 10)
    out = _threads([lambda r=r: join(_client(address), r, 3, 5.0, token=b"t" * 32)
                    for r in range(3)])
    assert out == [None, None, None]
    del server


def _left_behind():
    import psutil

    left = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "forkserver" in cmd or "resource_tracker" in cmd:
            continue
        left.append(p.pid)
    return left


@pytest.mark.slow
@pytest.mark.parametrize("after", [-1, 2], ids=["start-up", "mid-fit"])
@pytest.mark.parametrize("action", ["stop", "kill"])
def test_stopped_or_killed_worker_ends_in_a_clear_error_and_nothing_left(data, action, after):
    import psutil

    X, _, _ = data
    before = set(_left_behind())
    t0 = time.monotonic()
    with pytest.raises(DistributedFitError) as err:
        fit_distributed(X, K, n_workers=P, mode="row", random_state=0, max_iter=50, tol=0.0,
                        timeout=5, _fault={"rank": 1, "after_iter": after, "action": action})
    msg = str(err.value)
    assert ("stopped (SIGSTOP)" if action == "stop" else "killed by signal 9") in msg, msg
    assert time.monotonic() - t0 < 60
    time.sleep(0.5)
    left = [p for p in set(_left_behind()) - before if psutil.pid_exists(p)
            and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert left == []
