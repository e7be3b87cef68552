"""One reset of the random generators, for the test fixtures and the golden cases."""

import torch


def reset_rngs(seed: int = 0) -> None:
    """Seed torch (and, through Pyro, numpy and ``random``) and clear Pyro's param store."""
    torch.manual_seed(seed)
    try:
        import pyro

        pyro.set_rng_seed(seed)
        pyro.clear_param_store()
    except ImportError:  # pragma: no cover
        pass
