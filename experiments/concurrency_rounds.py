"""The concurrency cases of issue 28, many rounds in a row, each with a negative control.

Every round is cheap: the processes are forked from this warm interpreter (numba,
consensuskit and the fit kernels already loaded), and they exercise only the path under
test.  ``--unlocked`` runs the same rounds with the protection under test removed in
every process (the negative control: those rounds should fail).

cases
  index-procs    ``--procs`` processes released together, each adding ``--keys`` entries of
                 its own to one numba cache index (``IndexDataCacheFile.save``, 200 kB
                 each); afterwards every entry must load back its own data.
                 Control: numba's unlocked ``save``.
  compile-procs  ``--procs`` processes released together, each compiling its own
                 specialisation (a closure over K, as MM's E-step per K) of one
                 ``cache=True`` function into a fresh cache; then ``--procs`` fresh
                 processes load each K from the cache and check its value.
                 Control: numba's unlocked ``save``/``load``.
  ck-threads     a BCE fit holding a ``checkpoint_path`` (blocked in its callback) and a
                 second fit on the same path in another thread: the second must fail at
                 once with the clear error and the file must hold the first fit's run.
                 Control: ``checkpoint._lock`` replaced by a no-op.
  save-threads   8 threads writing one path 5 times each: no error, one file left.
                 Control: a temporary name per process only (the issue's crash).
  ck-procs       the ck-threads case with two processes.  Control: no lock.
  killed-writes  a process writing checkpoints every iteration is SIGKILLed while a
                 temporary file exists (inside a write); the run is then resumed from the
                 path and stopped after one step: no ``*.tmp-*`` file may be left and the
                 checkpoint must load.  Control: stale temporaries not removed.

    PYTHONPATH=. python experiments/concurrency_rounds.py --rounds 100 [--unlocked] [cases]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np

import consensuskit as ck
from consensuskit.data.generate import noisy_copies
from consensuskit.io import checkpoint, numba_cache, persistence

CASES = ("index-procs", "compile-procs", "ck-threads", "save-threads", "ck-procs",
         "killed-writes")


# --------------------------------------------------------------------------- helpers
def fork(fn, *args) -> int:
    """Run ``fn(*args)`` in a forked child; its exit status is 0 when it returned
    normally, 1 when it raised (the traceback goes to stderr)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    return pid


def wait(pid) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def unlock_numba():
    from numba.core import caching

    cls = caching.IndexDataCacheFile
    cls.save, cls.load = cls.save.__wrapped__, cls.load.__wrapped__


def no_checkpoint_lock():
    checkpoint._lock = lambda path: os.open(os.devnull, os.O_RDONLY)


# --------------------------------------------------------------------------- numba index
def _index(folder):
    from numba.core import caching

    return caching.IndexDataCacheFile(folder, "kernel-1.py311", ("stamp", 1))


def _add_entries(folder, proc, keys, gate, unlocked):
    if unlocked:
        unlock_numba()
    cache = _index(folder)
    os.read(gate, 1)  # released with the others
    for j in range(keys):
        cache.save(("sig", proc, j), {"who": (proc, j), "pad": b"x" * 200_000})


def round_index_procs(tmp, args):
    r, w = os.pipe()
    pids = [fork(_add_entries, tmp, p, args.keys, r, args.unlocked) for p in range(args.procs)]
    os.write(w, b"g" * args.procs)
    rcs = [wait(p) for p in pids]
    os.close(r)
    os.close(w)
    cache = _index(tmp)
    lost = wrong = 0
    for p in range(args.procs):
        for j in range(args.keys):
            got = cache.load(("sig", p, j))
            lost += got is None
            wrong += got is not None and got["who"] != (p, j)
    ok = rcs == [0] * args.procs and lost == wrong == 0
    return ok, f"exit codes {rcs}, {lost} entries lost, {wrong} loaded another's data"


# --------------------------------------------------------------------------- numba compile
KERNEL = textwrap.dedent("""
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


def _compile(K, gate, unlocked):
    import kern  # noqa: F401  (written by round_compile_procs)

    if unlocked:
        unlock_numba()
    if gate is not None:
        os.read(gate, 1)
    got = kern.make(K)(np.ones(3))
    if got != K * (K + 1) / 2:
        raise AssertionError(f"K={K}: got {got}")


def round_compile_procs(tmp, args):
    from numba.core.config import reload_config

    os.environ["NUMBA_CACHE_DIR"] = os.path.join(tmp, "cache")
    reload_config()
    rcs = []
    for phase in ("compile", "load"):
        r, w = os.pipe()
        pids = [fork(_compile, K, r if phase == "compile" else None, args.unlocked)
                for K in range(2, 2 + args.procs)]
        os.write(w, b"g" * args.procs)
        rcs.append([wait(p) for p in pids])
        os.close(r)
        os.close(w)
    n_idx = sum(n.endswith(".nbi") for _, _, fs in os.walk(tmp) for n in fs)
    ok = rcs == [[0] * args.procs] * 2
    return ok, f"exit codes compile {rcs[0]} load {rcs[1]} ({n_idx} index files)"


# --------------------------------------------------------------------------- checkpoints
X1 = noisy_copies(np.repeat(np.arange(3), 20), 6, noise=0.2, random_state=1)
X2 = noisy_copies(np.repeat(np.arange(3), 20), 6, noise=0.2, random_state=2)


def _bce(**kw):
    return ck.BCE(n_clusters=3, n_init=1, random_state=0, alpha_estimate="meanfield", **kw)


def _holder_fit(path, started, release, max_iter=3):
    """A fit on ``path`` that signals ``started`` then waits for ``release`` in its
    first callback (so it holds the path while the other fit tries)."""
    def cb(state):
        if not started.is_set():
            started.set()
            release.wait(60)

    return _bce(max_iter=max_iter, tol=0.0, callback=cb, checkpoint_path=path,
                checkpoint_every=1).fit(X1)


def _intruder_fit(path):
    """'refused' (the clear error), 'ran' (it fitted and wrote), or the exception."""
    try:
        _bce(max_iter=3, tol=0.0, checkpoint_path=path, checkpoint_every=1).fit(X2)
    except RuntimeError as exc:
        if "is in use by another running fit" in str(exc):
            return "refused"
        return repr(exc)
    return "ran"


def _holds_first_run(path):
    """Whether ``path`` holds the first fit's run (X1): resuming it on X1 is accepted;
    a file written by the intruder (X2) is refused as written for other data."""
    try:
        _bce(max_iter=3, tol=0.0, callback=lambda s: False).fit(X1, resume_from=path)
        return True
    except ValueError:
        return False


def round_ck_threads(tmp, args):
    if args.unlocked:
        no_checkpoint_lock()
    path = os.path.join(tmp, "run.ck")
    started, release = threading.Event(), threading.Event()
    res = {}

    def first():
        try:
            res["first"] = _holder_fit(path, started, release).n_iter_
        except Exception as exc:  # noqa: BLE001
            res["first"] = repr(exc)

    th = threading.Thread(target=first)
    th.start()
    started.wait(60)
    second = _intruder_fit(path)
    release.set()
    th.join(60)
    holds = _holds_first_run(path)
    ok = second == "refused" and res.get("first") == 3 and holds
    return ok, f"second fit: {second}; first fit: {res.get('first')}; file holds first: {holds}"


_FITTED = None


def round_save_threads(tmp, args):
    global _FITTED
    if _FITTED is None:
        _FITTED = ck.MM(n_clusters=3, n_init=1, max_iter=5, random_state=0).fit(X1)
    if args.unlocked:
        persistence._temporary_name = lambda path: f"{path}.tmp-{os.getpid()}"
    path = os.path.join(tmp, "m.ck")
    errors = []

    def save():
        try:
            for _ in range(5):
                persistence.save(_FITTED, path)
        except Exception as exc:  # noqa: BLE001
            errors.append(type(exc).__name__)

    ths = [threading.Thread(target=save) for _ in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    left = sorted(os.listdir(tmp))
    same = left == ["m.ck"] and np.array_equal(persistence.load(path).labels_, _FITTED.labels_)
    ok = not errors and same
    return ok, f"errors {errors}; files left {left}"


def _proc_holder(path, started_w, release_r, unlocked):
    if unlocked:
        no_checkpoint_lock()

    class Started:
        done = False

        def is_set(self):
            return self.done

        def set(self):
            self.done = True
            os.write(started_w, b"s")

    class Release:
        def wait(self, timeout):
            os.read(release_r, 1)

    n = _holder_fit(path, Started(), Release()).n_iter_
    if n != 3:
        raise AssertionError(n)


def _proc_intruder(path, out_w, unlocked):
    if unlocked:
        no_checkpoint_lock()
    os.write(out_w, _intruder_fit(path).encode()[:200])


def round_ck_procs(tmp, args):
    path = os.path.join(tmp, "run.ck")
    s_r, s_w = os.pipe()
    r_r, r_w = os.pipe()
    o_r, o_w = os.pipe()
    holder = fork(_proc_holder, path, s_w, r_r, args.unlocked)
    os.read(s_r, 1)  # the holder is inside its fit, holding the path
    intruder = fork(_proc_intruder, path, o_w, args.unlocked)
    rc_i = wait(intruder)
    second = os.read(o_r, 200).decode()
    os.write(r_w, b"r")
    rc_h = wait(holder)
    for fd in (s_r, s_w, r_r, r_w, o_r, o_w):
        os.close(fd)
    holds = _holds_first_run(path)
    ok = second == "refused" and rc_i == 0 and rc_h == 0 and holds
    return ok, (f"second process: {second} (exit {rc_i}); first process exit {rc_h}; "
                f"file holds first: {holds}")


XK = noisy_copies(np.repeat(np.arange(5), 600), 12, noise=0.3, random_state=3)


def _killable(**kw):
    kw = {"max_iter": 10**6, "tol": 0.0, "checkpoint_every": 1, **kw}
    return ck.BCE(n_clusters=5, n_init=1, random_state=0, alpha_estimate="meanfield", **kw)


def _endless_writer(path):
    _killable(checkpoint_path=path).fit(XK)


def _kill_inside_a_write(tmp, path):
    """Start an endless checkpointed fit on ``path`` and SIGKILL it once a temporary file
    exists; (the temporaries left: empty when the write ended before the kill landed,
    a note): None and what was seen when no write started within 60 s."""
    pid = fork(_endless_writer, path)
    deadline = time.monotonic() + 60
    while not [n for n in os.listdir(tmp) if ".tmp-" in n]:
        if time.monotonic() > deadline:
            import psutil

            state = psutil.Process(pid).status()
            os.kill(pid, signal.SIGKILL)
            wait(pid)
            return None, f"no write seen in 60 s (writer {state}, files {os.listdir(tmp)})"
        time.sleep(0.0005)
    os.kill(pid, signal.SIGKILL)
    wait(pid)
    return [n for n in os.listdir(tmp) if ".tmp-" in n], ""


def round_killed_writes(tmp, args):
    if args.unlocked:
        persistence.remove_stale_temporaries = lambda path: []
    path = os.path.join(tmp, "run.ck")
    landed, attempt = [], 0
    while not landed and attempt < 10:  # until a kill lands inside a write (most do)
        attempt += 1
        landed, trouble = _kill_inside_a_write(tmp, path)
        if landed is None:
            return False, trouble
    if not os.path.exists(path):
        # killed inside the very first write: nothing to resume; start it again
        _killable(checkpoint_path=path, callback=lambda s: False).fit(XK)
    else:
        _killable(checkpoint_path=path, callback=lambda s: False).fit(XK, resume_from=path)
    left = [n for n in os.listdir(tmp) if ".tmp-" in n]
    loads = persistence.load_checkpoint(path) is not None
    ok = bool(landed) and not left and loads
    return ok, (f"kill {attempt} landed in a write, leaving {landed}; after the next write "
                f"{left}; loads {loads}")


ROUNDS = {"index-procs": round_index_procs, "compile-procs": round_compile_procs,
          "ck-threads": round_ck_threads, "save-threads": round_save_threads,
          "ck-procs": round_ck_procs, "killed-writes": round_killed_writes}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=list(CASES))
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--keys", type=int, default=5)
    ap.add_argument("--unlocked", action="store_true",
                    help="remove the protection under test (negative control)")
    ap.add_argument("--quiet", action="store_true", help="print failed rounds only")
    args = ap.parse_args()
    unknown = set(args.cases) - set(CASES)
    if unknown:
        ap.error(f"unknown cases {sorted(unknown)}; choose from {CASES}")
    if len(args.cases) > 1:
        # one interpreter per case: the thread cases can leave native thread pools behind
        # (two fits at once in two threads), and a process forked from a multi-threaded one
        # can inherit a held lock and hang
        import subprocess

        flags = [f"--rounds={args.rounds}", f"--procs={args.procs}", f"--keys={args.keys}",
                 *(["--unlocked"] if args.unlocked else []),
                 *(["--quiet"] if args.quiet else [])]
        lines = []
        for case in args.cases:
            out = subprocess.run([sys.executable, "-u", __file__, case, *flags],
                                 stdout=subprocess.PIPE, text=True)
            print(out.stdout.split("\n\nsummary\n")[0], flush=True)
            lines.append(out.stdout.rstrip().splitlines()[-1] if out.returncode == 0
                         else f"{case}: exit code {out.returncode}")
        print("\n".join(["", "summary"] + lines))
        return 0
    numba_cache.install()
    sys.path.insert(0, tmp_kern := tempfile.mkdtemp())
    with open(os.path.join(tmp_kern, "kern.py"), "w") as fh:
        fh.write(KERNEL)
    _bce(max_iter=2).fit(X1)  # warm: compile/load the fit kernels once, before any fork
    _killable(max_iter=2).fit(XK)
    mode = "UNLOCKED control" if args.unlocked else "protected"
    summary = []
    for case in args.cases:
        fails, first_fail, run = 0, None, 0
        longest = streak = 0
        t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        for i in range(args.rounds):
            tmp = tempfile.mkdtemp(prefix=f"{case}-")
            try:
                ok, what = ROUNDS[case](tmp, args)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            run += 1
            streak = streak + 1 if ok else 0
            longest = max(longest, streak)
            if not ok:
                fails += 1
                first_fail = i if first_fail is None else first_fail
            if not ok or not args.quiet:
                print(f"  {case} round {i}: {'ok' if ok else 'FAIL'}: {what}", flush=True)
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
               + ch1.ru_utime + ch1.ru_stime - ch0.ru_utime - ch0.ru_stime)
        line = (f"{case} [{mode}]: {run - fails}/{run} rounds passed, longest run of passes "
                f"{longest}, first failure {first_fail}; {time.perf_counter() - t0:.1f} s wall, "
                f"{cpu:.1f} s CPU")
        print(line, flush=True)
        summary.append(line)
    print("\n".join(["", "summary"] + summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
