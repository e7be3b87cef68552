"""``exp`` and ``log`` without a data-dependent loop or branch, for numba kernels that vectorise.

numba's ``math.exp``/``math.log`` are calls into the C library, which stop LLVM from
vectorising the loop around them; these two are written in straight-line arithmetic on
the bits of a float64, so a loop over rows that calls them compiles to SIMD
instructions.  Both are ``inline="always"`` (numba copies their typed IR into the
caller), so they compile as part of the kernels that call them: BCE's E-step
(:mod:`consensuskit.models.bce.kernels`) and MM's fused EM pass
(:mod:`consensuskit.models.mm.kernels`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["exp_nonpositive", "log_positive"]

_OPTS = {"cache": True, "fastmath": {"contract", "arcp", "reassoc", "nsz"},
         "error_model": "numpy", "no_cfunc_wrapper": True}
_INLINE = dict(_OPTS, inline="always")
_LN2_HI = 6.93147180369123816490e-01  # ln 2 split for an exact n * ln2 (Cody-Waite)
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.0 / math.log(2.0)
_SQRT2 = math.sqrt(2.0)


@njit(**_INLINE)
def exp_nonpositive(c):
    """``exp(c)`` for ``c <= 0`` (0 below -708), branch-free so that it vectorises.

    ``c = n ln2 + r`` with ``|r| <= ln2 / 2``; Taylor polynomial of degree 13 for
    ``exp(r)`` (truncation < 5e-18); ``2^n`` built from its exponent bits.
    Relative error a few ulp.
    """
    under = c < -708.0
    c = -708.0 if under else c
    n = math.floor(c * _INV_LN2 + 0.5)
    r = (c - n * _LN2_HI) - n * _LN2_LO
    e = 1.0 + r * (1.0 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (
        1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320 + r * (1.0 / 362880 + r * (
            1.0 / 3628800 + r * (1.0 / 39916800 + r * (1.0 / 479001600 + r * (
                1.0 / 6227020800)))))))))))))
    scale = np.int64((np.int64(n) + 1023) << 52).view(np.float64)
    return 0.0 if under else e * scale


@njit(**_INLINE)
def log_positive(x):
    """``ln x`` for a positive normal float64, branch-free so that it vectorises.

    ``x = 2^e m`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` from the bits;
    ``ln m = 2 atanh(s)``, ``s = (m - 1)/(m + 1)``, series to ``s^21`` (truncation < 1e-17).
    """
    bits = np.float64(x).view(np.int64)
    e = (bits >> 52) - 1023
    m = np.int64((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000).view(np.float64)
    big = m > _SQRT2
    m = 0.5 * m if big else m
    e = e + 1 if big else e
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    lm = 2.0 * s * (1.0 + z * (1.0 / 3 + z * (1.0 / 5 + z * (1.0 / 7 + z * (1.0 / 9 + z * (
        1.0 / 11 + z * (1.0 / 13 + z * (1.0 / 15 + z * (1.0 / 17 + z * (1.0 / 19 + z * (
            1.0 / 21)))))))))))
    fe = np.float64(e)
    return fe * _LN2_HI + (lm + fe * _LN2_LO)
