"""Processes and threads sharing caches and checkpoint paths (issue 28).

* numba's on-disk cache under concurrent writers: processes compiling different
  specialisations of one cached function at once (as MM's E-step per K) must each get
  their own machine code back; without :mod:`consensuskit.io.numba_cache`'s lock they
  may not (the negative control shows the race is real on this machine);
* two fits sharing a ``checkpoint_path`` (threads or processes): the second fails at
  once with a clear error; writers in many threads never collide on a temporary file;
* a writer killed mid-write leaves no ``*.tmp-*`` file after the next write.
"""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import consensuskit as ck
from consensuskit.io import persistence

KERNEL = textwrap.dedent("""
    import numpy as np
    from numba import njit

    def make(K):
        @njit(cache=True)
        def weighted(x):
            s = 0.0
            for k in range(K):
                s += x[k % x.size] * (k + 1)
            return s
        return weighted
""")

CHILD = textwrap.dedent("""
    import sys
    if sys.argv[2] == "locked":
        import consensuskit  # noqa: F401  (installs the cache lock)
    sys.path.insert(0, sys.argv[3])
    import numpy as np
    import kern
    K = int(sys.argv[1])
    got = kern.make(K)(np.ones(3))
    assert got == K * (K + 1) / 2, (K, got)
    print(got)
""")


def race_rounds(tmp_path, rounds, procs=4, locked=True):
    """Rounds of ``procs`` processes compiling ``weighted`` for K = 2.. at once into one
    fresh cache, then each K loaded back from the cache; the number of failed rounds."""
    (tmp_path / "kern.py").write_text(KERNEL)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), OMP_NUM_THREADS="1",
               PYTHONPATH=os.getcwd())
    mode = "locked" if locked else "unlocked"
    failed = 0
    for _ in range(rounds):
        subprocess.run(["rm", "-rf", str(tmp_path / "cache")], check=True)
        ok = True
        for _phase in ("compile", "load"):  # compile concurrently, then load concurrently
            ps = [subprocess.Popen([sys.executable, "-c", CHILD, str(k), mode,
                                    str(tmp_path)], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
                  for k in range(2, 2 + procs)]
            ok &= all(p.wait() == 0 for p in ps)
            for p in ps:
                p.communicate()
        failed += not ok
    return failed


def _index_threads(tmp_path, locked, n=16):
    """``n`` threads each adding its own entry to one numba cache index at once (the
    step MM's per-K kernels race on); the entries that survive, each read back."""
    from numba.core import caching

    from consensuskit.io import numba_cache

    numba_cache.install()
    cls = caching.IndexDataCacheFile
    save = cls.save if locked else cls.save.__wrapped__
    load = cls.load if locked else cls.load.__wrapped__
    cache = cls(str(tmp_path), "kernel-1.py311", ("stamp", 1))
    barrier = threading.Barrier(n)

    def add(k):
        barrier.wait()
        save(cache, ("sig", k), {"K": k, "pad": b"x" * 200_000})

    ths = [threading.Thread(target=add, args=(k,)) for k in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    got = {}
    for k in range(n):
        data = load(cache, ("sig", k))
        got[k] = None if data is None else data["K"]
    return got


@pytest.mark.parametrize("rounds", [pytest.param(5, id="5"),
                                    pytest.param(100, id="100", marks=pytest.mark.slow)])
def test_numba_cache_index_concurrent_writers(tmp_path, rounds):
    """With the lock, every writer's entry survives and loads its own data."""
    for rnd in range(rounds):
        folder = tmp_path / str(rnd)
        folder.mkdir()
        got = _index_threads(folder, locked=True)
        assert got == {k: k for k in got}, got


@pytest.mark.slow
def test_numba_cache_index_race_without_the_lock(tmp_path):
    """Negative control: numba's save unlocked loses or mixes entries here."""
    bad = 0
    for rnd in range(20):
        folder = tmp_path / str(rnd)
        folder.mkdir()
        got = _index_threads(folder, locked=False)
        bad += got != {k: k for k in got}
    assert bad > 0


@pytest.mark.slow
def test_numba_cache_concurrent_processes(tmp_path):
    """The same with processes (a few rounds: each starts 8 interpreters)."""
    assert race_rounds(tmp_path, rounds=3) == 0


X = np.array([[0, 1, 0], [0, 1, 0], [1, 0, 1], [1, 0, 1], [0, 0, 1], [1, 1, 0]] * 5)


def test_two_fits_sharing_a_checkpoint_path(tmp_path):
    """The second fit on a path in use fails at once; the first is unharmed."""
    path = tmp_path / "run.ck"
    started, release = threading.Event(), threading.Event()

    def slow(state):
        started.set()
        release.wait(30)

    results = {}

    def first():
        est = ck.BCE(n_clusters=2, n_init=1, max_iter=3, tol=0.0, random_state=0,
                     alpha_estimate="meanfield",
                     callback=slow, checkpoint_path=path, checkpoint_every=1)
        results["first"] = est.fit(X)

    th = threading.Thread(target=first)
    th.start()
    assert started.wait(60)
    try:
        with pytest.raises(RuntimeError, match="is in use by another running fit"):
            ck.BCE(n_clusters=2, n_init=1, max_iter=3, random_state=0,
                   checkpoint_path=path).fit(X)
    finally:
        release.set()
        th.join(60)
    assert results["first"].n_iter_ == 3
    # the path is free again once the first fit has returned
    ck.BCE(n_clusters=2, n_init=1, max_iter=2, random_state=0, checkpoint_path=path).fit(X)


def test_many_threads_saving_one_path(tmp_path):
    est = ck.MM(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(X)
    path = tmp_path / "m.ck"
    errors = []

    def save():
        try:
            for _ in range(5):
                persistence.save(est, path)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    ths = [threading.Thread(target=save) for _ in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert errors == []
    assert sorted(os.listdir(tmp_path)) == ["m.ck"]
    np.testing.assert_array_equal(persistence.load(path).labels_, est.labels_)


WRITER = textwrap.dedent("""
    import sys, numpy as np
    from consensuskit.io import persistence
    import consensuskit as ck
    est = ck.MM(n_clusters=2, n_init=1, max_iter=3, random_state=0).fit(
        np.array([[0, 1], [1, 0], [0, 1], [1, 1]] * 50))
    est.big_ = np.zeros(1_000_000)  # a write that takes a while
    print("ready", flush=True)
    while True:
        persistence.save(est, sys.argv[1])
""")


@pytest.mark.slow
def test_killed_writer_leaves_nothing_after_the_next_write(tmp_path):
    path = tmp_path / "m.ck"
    left = []
    for _attempt in range(5):  # until a kill lands inside a write (it nearly always does)
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                             stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=os.getcwd()))
        assert p.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        while not [n for n in os.listdir(tmp_path) if ".tmp-" in n]:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        p.send_signal(signal.SIGKILL)
        p.wait()
        left = [n for n in os.listdir(tmp_path) if ".tmp-" in n]
        if left:
            break
    assert left, "no kill landed inside a write"
    est = ck.MM(n_clusters=2, n_init=1, max_iter=3, random_state=0).fit(X)
    persistence.save(est, path)
    assert sorted(os.listdir(tmp_path)) == ["m.ck"]
