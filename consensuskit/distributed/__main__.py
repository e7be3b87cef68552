"""``python -m consensuskit.distributed fit ...`` (under torchrun or with --workers)."""

import sys

from consensuskit.distributed.launch import main

if __name__ == "__main__":
    sys.exit(main())
