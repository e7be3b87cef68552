"""The distributed fault table (issue 28, Must show 2): faults at start-up and mid-fit,
and launch mistakes, on 127.0.0.1 only.

For each case: seconds until a clear error (goal: within the timeout + 10 s), the first
line(s) of that error, and the processes left behind (goal: none).  Also what listens on
which address during a normal local fit and a hand-launched one (``ss -ltnp``).

    PYTHONPATH=. OMP_NUM_THREADS=1 python experiments/distributed_faults.py [--timeout 10]

Cases:
  kill/stop at start-up, kill/stop mid-fit   ``fit_distributed`` with 3 local workers,
                                             rank 1 sends itself SIGKILL / SIGSTOP
                                             before joining / after EM iteration 2
  port in use          hand-launched ranks (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
                       as torchrun sets them) on a port another socket holds
  missing rank         world size 3, ranks 0 and 1 launched
  world-size mismatch  ranks 0, 2 say 3; rank 1 says 2
  foreign token        rank 2 holds another CONSENSUSKIT_DIST_TOKEN
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import psutil

from consensuskit.data.generate import noisy_copies
from consensuskit.distributed import fit_distributed
from consensuskit.distributed.launch import DistributedFitError


def data():
    truth = np.repeat(np.arange(3), 20)
    return noisy_copies(truth, 8, noise=0.2, random_state=0)


def descendants():
    me = psutil.Process()
    out = set()
    for p in me.children(recursive=True):
        try:
            if "resource_tracker" in " ".join(p.cmdline()) or "forkserver" in " ".join(
                    p.cmdline()):
                continue  # multiprocessing's helpers, one per session
            out.add(p.pid)
        except psutil.Error:
            pass
    return out


def listening(pids):
    """``address:port`` sockets listened on by ``pids`` (from ``ss -ltnp``)."""
    txt = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    out = []
    for line in txt.splitlines():
        m = re.search(r"pid=(\d+)", line)
        if m and int(m.group(1)) in pids:
            out.append(line.split()[3])
    return sorted(set(out))


def local_case(X, action, after, timeout):
    """(seconds from the fault to the error, error, processes left)."""
    before = descendants()
    log = tempfile.NamedTemporaryFile(suffix=".faults", delete=False).name
    try:
        fit_distributed(X, 3, n_workers=3, mode="row", random_state=0, max_iter=50, tol=0.0,
                        timeout=timeout, _fault={"rank": 1, "after_iter": after,
                                                 "action": action, "log_path": log})
        msg = "NO ERROR"
    except DistributedFitError as exc:
        msg = str(exc)
    t_error = time.time()
    with open(log) as fh:
        t_fault = float(fh.read().split()[0])
    os.unlink(log)
    elapsed = t_error - t_fault
    time.sleep(0.5)
    left = descendants() - before
    return elapsed, msg, left


def watch_listeners(stop, found):
    while not stop.is_set():
        pids = {os.getpid()} | descendants()
        for p in list(pids):
            try:
                pids |= {c.pid for c in psutil.Process(p).children(recursive=True)}
            except psutil.Error:
                pass
        found.update(listening(pids))
        time.sleep(0.2)


def normal_local_fit(X, timeout):
    stop, found = threading.Event(), set()
    # the fork server's children are the workers: watch every process of this session
    th = threading.Thread(target=watch_listeners, args=(stop, found))
    th.start()
    try:
        fit_distributed(X, 3, n_workers=3, mode="row", random_state=0, max_iter=200, tol=0.0,
                        timeout=timeout)
    finally:
        stop.set()
        th.join()
    return sorted(found)


RANK = r"""
import os, sys, time
def mark(what, log=os.environ["CK_FAULT_TIMES"]):
    with open(log, "a") as fh:
        fh.write(f"{what} {time.time():.6f}\n")
mark("python")
import torch, torch.distributed, pandas  # noqa: E401  (what a rank imports before joining)
from consensuskit.distributed import launch
from consensuskit.models.bce import cavi  # noqa: F401
mark("imported")
store = launch._cli_store
def entering_the_join(timeout):
    mark("join")
    return store(timeout)
launch._cli_store = entering_the_join
leave = os._exit
def leave_marked(code):
    mark("error")
    leave(code)
os._exit = leave_marked  # a rank's clear error is printed, then it leaves with os._exit(1)
rc = launch.main(sys.argv[1:])
mark("done")
sys.exit(rc)
"""


def hand_launch(csv, out, ranks, world_sizes, port, timeout, tokens=None, watch=False):
    """Start ranks by hand as torchrun would set them and wait for all.

    Each rank runs :data:`RANK`, which logs the time its interpreter runs its first line,
    has imported what a rank imports, enters the join (the store: rank 0 binds it, the
    others connect) and prints its error.  Returns (seconds from launch to the last exit,
    exit codes, last stderr lines, processes left, listening sockets, per-rank times)."""
    procs, logs = [], []
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp()
    for i, r in enumerate(ranks):
        logs.append(os.path.join(tmp, f"rank{i}.times"))
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world_sizes[i]),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   LOCAL_RANK=str(r), CK_FAULT_TIMES=logs[-1])
        if tokens is not None:
            env["CONSENSUSKIT_DIST_TOKEN"] = tokens[i]
        launched = time.time()
        procs.append(subprocess.Popen(
            [sys.executable, "-c", RANK, "fit", "--n-clusters", "3",
             "--max-iter", "200", "--tol", "0", "--quiet", "--timeout", str(timeout), csv,
             "-o", out], env=env, stderr=subprocess.PIPE, text=True))
        with open(logs[-1], "w") as fh:
            fh.write(f"launched {launched:.6f}\n")
    found = set()
    if watch:
        while any(p.poll() is None for p in procs):
            found.update(listening({p.pid for p in procs}))
            time.sleep(0.2)
    errs, rcs, exited = [], [], []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout + 600)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        exited.append(time.time())
        rcs.append(p.returncode)
        errs.append(err.strip().splitlines()[-1] if err.strip() else "")
    elapsed = time.monotonic() - t0
    left = [p.pid for p in procs if psutil.pid_exists(p.pid)
            and psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE]
    times = []
    for log in logs:
        with open(log) as fh:
            marks = dict(line.split() for line in fh if line.strip())
        times.append({k: float(v) for k, v in marks.items()})
    return elapsed, rcs, errs, left, sorted(found), times


def rank_times(times):
    """Per rank: interpreter start (launch to first line), imports, and join entry to
    the clear error ('-' when the rank did not fail)."""
    out = []
    for t in times:
        start = t["python"] - t["launched"] if "python" in t else float("nan")
        imports = t["imported"] - t["python"] if "imported" in t else float("nan")
        to_err = t["error"] - t["join"] if "error" in t and "join" in t else None
        out.append((start, imports, to_err))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args()
    T = args.timeout
    X = data()
    rows, hand_rows = [], []
    print(f"timeout = {T:g} s; goal: a clear error within {T + 10:g} s, nothing left behind\n")
    t0 = time.monotonic()
    listen = normal_local_fit(X, T)
    print(f"normal local fit (3 workers, 200 iterations, {time.monotonic() - t0:.1f} s): "
          f"listening sockets of this session: {listen}\n")
    for action in ("kill", "stop"):
        for after, when in ((-1, "start-up"), (2, "mid-fit")):
            el, msg, left = local_case(X, action, after, T)
            rows.append((f"{action} rank 1 at {when}", el, msg.splitlines()[1:4], left))
    with tempfile.TemporaryDirectory() as tmp:
        import pandas as pd

        csv = os.path.join(tmp, "labels.csv")
        pd.DataFrame(X).to_csv(csv, index=False)
        out = os.path.join(tmp, "out.csv")
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "import torch, pandas, "
                        "consensuskit.distributed.launch"], check=True)
        startup = time.monotonic() - t0
        print(f"start-up of one hand-launched rank (imports, alone): {startup:.1f} s; three "
              "start at once on this machine\n")
        port = free_port()
        el, rcs, errs, left, found, _ = hand_launch(csv, out, [0, 1, 2], [3, 3, 3], port, T,
                                                    watch=True)
        print(f"hand-launched ranks (MASTER_ADDR=127.0.0.1, 200 iterations, {el:.1f} s): "
              f"exit codes {rcs}, listening: {found}\n")
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        busy = holder.getsockname()[1]
        hand = []
        hand.append(("port in use", *hand_launch(csv, out, [0, 1, 2], [3, 3, 3], busy, T)))
        holder.close()
        hand.append(("missing rank 2", *hand_launch(csv, out, [0, 1], [3, 3], free_port(),
                                                    T)))
        hand.append(("world-size mismatch", *hand_launch(csv, out, [0, 1, 2], [3, 2, 3],
                                                         free_port(), T)))
        hand.append(("foreign token (rank 2)", *hand_launch(
            csv, out, [0, 1, 2], [3, 3, 3], free_port(), T,
            tokens=["a" * 32, "a" * 32, "b" * 32])))
        for name, el, rcs, errs, left, _, times in hand:
            per = rank_times(times)
            worst = max((e for _, _, e in per if e is not None), default=float("nan"))
            rows.append((name, worst, [f"rc={rcs}", *errs], left))
            hand_rows.append((name, el, per))
    print("seconds: local cases from the fault (logged by the rank) to the launcher's error; "
          "hand-launched cases from the rank's entry into the join (logged inside the rank) "
          "to its clear error, the largest over the ranks that failed")
    print(f"{'case':28s} {'seconds':>8s} {'<= T+10':>8s} {'left':>5s}  error")
    for name, el, msg, left in rows:
        print(f"{name:28s} {el:8.1f} {str(el <= T + 10):>8s} {len(left):5d}  "
              + "\n" + "\n".join(f"{'':52s}{m[:160]}" for m in msg))
    print("\nhand-launched ranks, per rank: interpreter start (launch to first line) / "
          "imports (torch, consensuskit) / join entry to clear error")
    for name, el, per in hand_rows:
        cells = "; ".join(f"rank {i}: {a:.1f} / {b:.1f} / "
                          + ("-" if e is None else f"{e:.1f}") for i, (a, b, e) in enumerate(per))
        print(f"  {name:24s} ({el:.1f} s launch to last exit): {cells}")
    time.sleep(1.0)
    mine = descendants()
    print(f"\nafter all cases: {len(mine)} processes of this session left "
          f"({sorted(mine)}); listening sockets of them: {listening(mine | {os.getpid()})}")

if __name__ == "__main__":
    main()
