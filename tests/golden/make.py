"""Write tests/golden/golden.npz from the current code (see cases.py)."""

import sys
from pathlib import Path

import numpy as np
import torch

from tests.golden.cases import cases, run_case

torch.set_num_threads(1)


def main(names=None):
    path = Path(__file__).with_name("golden.npz")
    old = dict(np.load(path)) if path.exists() else {}
    table, _, _ = cases()
    for name in names or table:
        for key in [k for k in old if k.startswith(name + "/")]:
            del old[key]
        for attr, v in run_case(name).items():
            old[f"{name}/{attr}"] = v
        print("golden:", name)
    np.savez_compressed(path, **old)


if __name__ == "__main__":
    main(sys.argv[1:] or None)
