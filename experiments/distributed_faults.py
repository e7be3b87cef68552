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


def hand_launch(csv, out, ranks, world_sizes, port, timeout, tokens=None, watch=False):
    """Start ranks by hand as torchrun would set them; wait for all; (seconds, rcs, stderr)."""
    procs = []
    t0 = time.monotonic()
    for i, r in enumerate(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world_sizes[i]),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   LOCAL_RANK=str(r))
        if tokens is not None:
            env["CONSENSUSKIT_DIST_TOKEN"] = tokens[i]
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "consensuskit.distributed", "fit", "--n-clusters", "3",
             "--max-iter", "200", "--tol", "0", "--quiet", "--timeout", str(timeout), csv,
             "-o", out], env=env, stderr=subprocess.PIPE, text=True))
    found = set()
    if watch:
        while any(p.poll() is None for p in procs):
            found.update(listening({p.pid for p in procs}))
            time.sleep(0.2)
    errs = []
    rcs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        rcs.append(p.returncode)
        errs.append(err.strip().splitlines()[-1] if err.strip() else "")
    elapsed = time.monotonic() - t0
    left = [p.pid for p in procs if psutil.pid_exists(p.pid)
            and psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE]
    return elapsed, rcs, errs, left, sorted(found)


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
    rows = []
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
        el, rcs, errs, left, found = hand_launch(csv, out, [0, 1, 2], [3, 3, 3], port, T,
                                                 watch=True)
        print(f"hand-launched ranks (MASTER_ADDR=127.0.0.1, 200 iterations, {el:.1f} s, "
              f"of which start-up: see 'missing rank'): exit codes {rcs}, listening: {found}\n")
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        busy = holder.getsockname()[1]
        el, rcs, errs, left, _ = hand_launch(csv, out, [0, 1, 2], [3, 3, 3], busy, T)
        rows.append(("port in use", el, [f"rc={rcs}", errs[0]], left))
        holder.close()
        el, rcs, errs, left, _ = hand_launch(csv, out, [0, 1], [3, 3], free_port(), T)
        rows.append(("missing rank 2", el, [f"rc={rcs}", errs[0]], left))
        el, rcs, errs, left, _ = hand_launch(csv, out, [0, 1, 2], [3, 2, 3], free_port(), T)
        rows.append(("world-size mismatch", el, [f"rc={rcs}", *errs], left))
        el, rcs, errs, left, _ = hand_launch(csv, out, [0, 1, 2], [3, 3, 3], free_port(), T,
                                             tokens=["a" * 32, "a" * 32, "b" * 32])
        rows.append(("foreign token (rank 2)", el, [f"rc={rcs}", *errs], left))
    print("seconds: local cases from the fault (logged by the rank) to the launcher's error; "
          "hand-launched cases from starting the processes (start-up included, see above)")
    print(f"{'case':28s} {'seconds':>8s} {'<= T+10':>8s} {'left':>5s}  error")
    for name, el, msg, left in rows:
        print(f"{name:28s} {el:8.1f} {str(el <= T + 10):>8s} {len(left):5d}  "
              + "\n" + "\n".join(f"{'':52s}{m[:160]}" for m in msg))


if __name__ == "__main__":
    main()
