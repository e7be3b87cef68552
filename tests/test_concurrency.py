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


def _fork(fn, *args) -> int:
    """``fn(*args)`` in a forked child; exit status 0 when it returned, 1 when it raised."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn(*args)
            code = 0
        finally:
            os._exit(code)
    return pid


def _exit_code(pid) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _index_processes(folder, locked, procs=4, keys=5):
    """``procs`` forked processes released together, each adding ``keys`` entries of its
    own to one numba cache index; (entries lost or loading another's data, exit codes)."""
    from numba.core import caching

    from consensuskit.io import numba_cache

    numba_cache.install()
    cls = caching.IndexDataCacheFile
    save = cls.save if locked else cls.save.__wrapped__
    stamp = ("stamp", 1)

    def add(p, gate):
        cache = cls(str(folder), "kernel-1.py311", stamp)
        os.read(gate, 1)
        for j in range(keys):
            save(cache, ("sig", p, j), {"who": (p, j), "pad": b"x" * 200_000})

    r, w = os.pipe()
    pids = [_fork(add, p, r) for p in range(procs)]
    os.write(w, b"g" * procs)
    codes = [_exit_code(pid) for pid in pids]
    os.close(r)
    os.close(w)
    cache = cls(str(folder), "kernel-1.py311", stamp)
    bad = sum((got := cache.load(("sig", p, j))) is None or got["who"] != (p, j)
              for p in range(procs) for j in range(keys))
    return bad, codes


@pytest.mark.slow
def test_numba_cache_index_concurrent_processes(tmp_path):
    """Processes (not threads) adding entries to one index at once: none is lost
    (experiments/concurrency_rounds.py index-procs runs 100 rounds)."""
    for rnd in range(20):
        folder = tmp_path / str(rnd)
        folder.mkdir()
        assert _index_processes(folder, locked=True) == (0, [0, 0, 0, 0])


@pytest.mark.slow
def test_numba_cache_index_processes_without_the_lock(tmp_path):
    """Negative control: numba's unlocked save loses entries across processes here."""
    bad = 0
    for rnd in range(20):
        folder = tmp_path / str(rnd)
        folder.mkdir()
        bad += _index_processes(folder, locked=False)[0] > 0
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


X2 = X[::-1].copy()  # other data: a checkpoint of it is refused for X


def _holder(path, started, release):
    """BCE fit on ``path`` calling ``started()`` then ``release()`` in its first callback
    (so it holds the path while another fit tries it)."""
    calls = []

    def cb(state):
        if not calls:
            calls.append(1)
            started()
            release()

    return ck.BCE(n_clusters=2, n_init=1, max_iter=3, tol=0.0, random_state=0,
                  alpha_estimate="meanfield", callback=cb, checkpoint_path=path,
                  checkpoint_every=1).fit(X)


def _intruder(path) -> str:
    try:
        ck.BCE(n_clusters=2, n_init=1, max_iter=3, tol=0.0, random_state=0,
               alpha_estimate="meanfield", checkpoint_path=path, checkpoint_every=1).fit(X2)
    except RuntimeError as exc:
        return "refused" if "is in use by another running fit" in str(exc) else repr(exc)
    return "ran"


def _holds_holders_run(path) -> bool:
    """The file at ``path`` is the holder's run (resuming it on X is accepted)."""
    try:
        ck.BCE(n_clusters=2, n_init=1, max_iter=3, tol=0.0, random_state=0,
               alpha_estimate="meanfield", callback=lambda s: False).fit(X, resume_from=path)
    except ValueError:
        return False
    return True


FIT_ON_PATH = textwrap.dedent("""
    import os, sys
    import numpy as np
    import consensuskit as ck
    from consensuskit.io import checkpoint
    role, path, unlocked = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if unlocked:
        checkpoint._lock = lambda path: os.open(os.devnull, os.O_RDONLY)
    X = np.array([[0, 1, 0], [0, 1, 0], [1, 0, 1], [1, 0, 1], [0, 0, 1], [1, 1, 0]] * 5)
    calls = []
    def hold(state):  # the holder signals, then waits for a line on stdin
        if not calls:
            calls.append(1)
            print("started", flush=True)
            sys.stdin.readline()
    kw = dict(n_clusters=2, n_init=1, max_iter=3, tol=0.0, random_state=0,
              alpha_estimate="meanfield", checkpoint_path=path, checkpoint_every=1)
    if role == "holder":
        print(ck.BCE(callback=hold, **kw).fit(X).n_iter_, flush=True)
    else:
        try:
            ck.BCE(**kw).fit(X[::-1].copy())
            print("ran")
        except RuntimeError as exc:
            print("refused" if "is in use by another running fit" in str(exc) else repr(exc))
""")


def _two_processes_one_path(path, unlocked=False):
    """The holder and the intruder as two processes (fresh interpreters); (intruder's
    outcome, exit codes of intruder and holder)."""
    env = dict(os.environ, PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    flag = "1" if unlocked else "0"
    holder = subprocess.Popen([sys.executable, "-c", FIT_ON_PATH, "holder", str(path), flag],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "started"
        intruder = subprocess.run([sys.executable, "-c", FIT_ON_PATH, "intruder", str(path),
                                   flag], capture_output=True, text=True, env=env, timeout=300)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        out, _ = holder.communicate(timeout=300)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert out.strip() == "3"
    return intruder.stdout.strip(), intruder.returncode, holder.returncode


def _without_the_checkpoint_lock(monkeypatch):
    from consensuskit.io import checkpoint

    monkeypatch.setattr(checkpoint, "_lock", lambda path: os.open(os.devnull, os.O_RDONLY))


@pytest.mark.slow
def test_two_processes_sharing_a_checkpoint_path(tmp_path):
    """The second process's fit fails at once with the clear error; the file holds the
    first's run (experiments/concurrency_rounds.py ck-procs runs 100 rounds)."""
    for rnd in range(3):
        path = tmp_path / f"run{rnd}.ck"
        assert _two_processes_one_path(path) == ("refused", 0, 0)
        assert _holds_holders_run(path)


def test_two_threads_sharing_a_path_without_the_lock(tmp_path, monkeypatch):
    """Negative control of the thread test above: without the lock the second fit runs
    and overwrites the first one's state (the issue's silent loss)."""
    _without_the_checkpoint_lock(monkeypatch)
    path = tmp_path / "thread.ck"
    go = threading.Event()
    th = threading.Thread(target=_holder, args=(path, lambda: None, lambda: go.wait(30)))
    th.start()
    try:
        assert _intruder(path) == "ran"
        assert not _holds_holders_run(path)
    finally:
        go.set()
        th.join(60)


@pytest.mark.slow
def test_two_processes_sharing_a_path_without_the_lock(tmp_path):
    """Negative control of the process test: without the lock the second process fits."""
    assert _two_processes_one_path(tmp_path / "run.ck", unlocked=True) == ("ran", 0, 0)


def _threads_saving_one_path(tmp_path):
    """8 threads saving one fitted MM to one path 5 times each; (errors, the fit)."""
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
    return errors, est


def test_many_threads_saving_one_path(tmp_path):
    errors, est = _threads_saving_one_path(tmp_path)
    assert errors == []
    assert sorted(os.listdir(tmp_path)) == ["m.ck"]
    np.testing.assert_array_equal(persistence.load(tmp_path / "m.ck").labels_, est.labels_)


def test_threads_saving_with_a_temporary_name_per_process(tmp_path, monkeypatch):
    """Negative control: a temporary name unique per process only (the issue's
    FileNotFoundError: one thread renames the file another is still writing)."""
    monkeypatch.setattr(persistence, "_temporary_name", lambda path: f"{path}.tmp-{os.getpid()}")
    errors, _ = _threads_saving_one_path(tmp_path)
    assert any(isinstance(e, FileNotFoundError) for e in errors)


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


def _killed_writer_leftovers(tmp_path, attempts=5):
    """Kill a process looping over ``persistence.save`` while its temporary file exists,
    then write again from here; (temporaries after the kill, files after the next
    write)."""
    path = tmp_path / "m.ck"
    left = []
    for _attempt in range(attempts):  # until a kill lands inside a write (nearly always)
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
    est = ck.MM(n_clusters=2, n_init=1, max_iter=3, random_state=0).fit(X)
    persistence.save(est, path)
    return left, sorted(os.listdir(tmp_path))


@pytest.mark.slow
def test_killed_writer_leaves_nothing_after_the_next_write(tmp_path):
    """(experiments/concurrency_rounds.py killed-writes runs 100 rounds of a checkpointed
    fit killed inside a write and resumed.)"""
    left, after = _killed_writer_leftovers(tmp_path)
    assert left, "no kill landed inside a write"
    assert after == ["m.ck"]


@pytest.mark.slow
def test_killed_writer_leftovers_without_the_cleanup(tmp_path, monkeypatch):
    """Negative control: without removing stale temporaries the killed write's file stays."""
    monkeypatch.setattr(persistence, "remove_stale_temporaries", lambda path: [])
    left, after = _killed_writer_leftovers(tmp_path)
    assert left and after == sorted(["m.ck", *left])
