"""Plots of a :class:`~consensuskit.posterior.PartitionPosterior` (matplotlib)."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_psm", "plot_credible_ball", "plot_n_clusters", "estimate_order"]


def estimate_order(pp, estimate):
    """Item order (N,) grouping ``estimate``'s clusters, largest first, items within a cluster
    by decreasing confidence; and the cluster boundaries (positions between groups)."""
    z = np.unique(np.asarray(estimate), return_inverse=True)[1].ravel()
    conf = pp.item_confidence(z)
    sizes = np.bincount(z)
    rank = np.argsort(np.argsort(-sizes, kind="stable"), kind="stable")
    order = np.lexsort((-conf, rank[z]))
    bounds = np.cumsum(np.sort(sizes)[::-1])[:-1]
    return order, bounds


def _ax(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots()
    return ax


def plot_psm(pp, estimate, ax=None, cmap="Greys", max_dense=5000):
    ax = _ax(ax)
    order, bounds = estimate_order(pp, estimate)
    P = pp.psm(block=(order, order)) if pp.n_items <= max_dense else None
    if P is None:
        raise ValueError(f"N={pp.n_items} is too large for a dense PSM plot (max_dense)")
    im = ax.imshow(P, cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    for b in bounds:
        ax.axhline(b - 0.5, color="tab:red", lw=0.8)
        ax.axvline(b - 0.5, color="tab:red", lw=0.8)
    ax.set_title("posterior similarity, ordered by the estimate")
    ax.figure.colorbar(im, ax=ax, fraction=0.046)
    return ax


def plot_credible_ball(pp, ball, X=None, axes=None):
    import matplotlib.pyplot as plt

    parts = [("estimate", ball.estimate, 0.0),
             ("upper vertical", ball.upper_vertical[0], ball.dist_upper_vertical),
             ("lower vertical", ball.lower_vertical[0], ball.dist_lower_vertical),
             ("horizontal", ball.horizontal[0], ball.dist_horizontal)]
    if axes is None:
        fig, axes = plt.subplots(1, 4, figsize=(14, 3.6))
    else:
        fig = np.ravel(axes)[0].figure
    order, bounds = estimate_order(pp, ball.estimate)
    for ax, (title, z, d) in zip(np.ravel(axes), parts):
        z = np.asarray(z)
        if X is not None:
            Xa = np.asarray(X)
            ax.scatter(Xa[:, 0], Xa[:, 1], c=z, cmap="tab20", s=8)
        else:
            zo = z[order]
            ax.imshow(zo[:, None] == zo[None, :], cmap="Greys", interpolation="nearest")
            for b in bounds:
                ax.axhline(b - 0.5, color="tab:red", lw=0.6)
                ax.axvline(b - 0.5, color="tab:red", lw=0.6)
        k = len(np.unique(z))
        ax.set_title(f"{title}\n{k} clusters, {ball.loss} distance {d:.3g}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{ball.level:.0%} credible ball, radius {ball.radius:.3g}")
    fig.tight_layout()  # keeps the panel titles clear of the figure title
    return fig


def plot_n_clusters(pp, ax=None):
    ax = _ax(ax)
    vals, probs = pp.n_clusters_distribution()
    ax.bar(vals, probs, color="tab:blue")
    ax.set_xlabel("number of clusters")
    ax.set_ylabel("posterior probability")
    return ax
