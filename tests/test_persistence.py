"""save()/load(): round trip, and clear errors for foreign, corrupted or future files."""

import json

import numpy as np
import pytest

from consensuskit.base import ConsensusEstimator
from consensuskit.io import persistence


class FirstColumn(ConsensusEstimator):
    """Toy consensus: the first base clustering itself."""

    def __init__(self, n_clusters=2):
        self.n_clusters = n_clusters

    def _fit(self, ensemble):
        self.labels_ = ensemble.codes[:, 0].copy()


class Other(FirstColumn):
    pass


@pytest.fixture
def fitted():
    X = np.array([[3, 1], [3, 2], [7, 2], [7, -1]])
    return FirstColumn(n_clusters=2).fit(X)


def test_round_trip(tmp_path, fitted):
    path = tmp_path / "m.ck"
    fitted.save(path)
    back = FirstColumn.load(path)
    assert type(back) is FirstColumn
    assert back.get_params() == fitted.get_params()
    np.testing.assert_array_equal(back.labels_, fitted.labels_)
    np.testing.assert_array_equal(back.ensemble_.codes, fitted.ensemble_.codes)


def test_not_our_file(tmp_path):
    path = tmp_path / "x.ck"
    path.write_bytes(b"hello world")
    with pytest.raises(ValueError, match="not a consensuskit"):
        persistence.load(path)


def test_corrupted_payload(tmp_path, fitted):
    path = tmp_path / "m.ck"
    fitted.save(path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted"):
        persistence.load(path)


def test_truncated(tmp_path, fitted):
    path = tmp_path / "m.ck"
    fitted.save(path)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="truncated or corrupted"):
        persistence.load(path)


def test_future_version(tmp_path, fitted):
    path = tmp_path / "m.ck"
    fitted.save(path)
    data = path.read_bytes()
    head, rest = data[len(persistence.MAGIC) :].split(b"\n", 1)
    header = json.loads(head)
    header["format_version"] = persistence.FORMAT_VERSION + 1
    path.write_bytes(persistence.MAGIC + json.dumps(header).encode() + b"\n" + rest)
    with pytest.raises(ValueError, match="newer"):
        persistence.load(path)


def test_wrong_class(tmp_path, fitted):
    path = tmp_path / "m.ck"
    fitted.save(path)
    with pytest.raises(ValueError, match="not a Other"):
        Other.load(path)



# ------------------------------------------------------------ files that cannot run code
import dataclasses  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402

import torch  # noqa: E402

import consensuskit as ck  # noqa: E402

LABELS = np.array([[0, 1, 0], [0, 1, 0], [1, 0, 1], [1, 0, 1], [0, 0, 1], [1, 1, 0]] * 3)


class _RunsShell:
    """Pickles as ``os.system(command)``: the payload of the crafted files."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _old_format_file(path, payload_obj, cls_name, kind="estimator"):
    """A file of the old format (version 1): our magic header, a correct sha256, a pickle."""
    payload = pickle.dumps(payload_obj)
    header = {"format_version": 1, "class": cls_name, "kind": kind,
              "sha256": hashlib.sha256(payload).hexdigest(), "n_bytes": len(payload)}
    path.write_bytes(persistence.MAGIC + json.dumps(header).encode() + b"\n" + payload)


CLASS_NAMES = ["consensuskit.models.bce.estimator:BCE", "consensuskit.estimators.bce:BCE"]


def _crafted(tmp_path, kind, stealthy, cls_name):
    """(file, sentinel): loading the file the unsafe way creates ``sentinel``."""
    sentinel = tmp_path / "ran"
    shell = _RunsShell(f"touch {sentinel}")
    if stealthy:  # a real fitted BCE with one extra pickled attribute
        est = ck.BCE(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(LABELS)
        state = dict(vars(est), extra_=shell)
        obj = {"state": state}
    else:
        obj = shell
    path = tmp_path / f"crafted-{kind}-{int(stealthy)}.ck"
    _old_format_file(path, obj, cls_name, kind)
    return path, sentinel


def test_the_payload_runs_when_unpickled(tmp_path):
    """Negative control: the crafted files do run code when unpickled as before."""
    path, sentinel = _crafted(tmp_path, "estimator", True, CLASS_NAMES[0])
    persistence.load(path, trust=True)
    assert sentinel.exists()


@pytest.mark.parametrize("cls_name", CLASS_NAMES)
@pytest.mark.parametrize("stealthy", [False, True])
def test_crafted_files_are_refused_without_running(tmp_path, stealthy, cls_name):
    path, sentinel = _crafted(tmp_path, "estimator", stealthy, cls_name)
    for call in (lambda: ck.BCE.load(path), lambda: persistence.load(path),
                 lambda: persistence.load(path, expected_class=ck.BCE)):
        with pytest.raises(persistence.UnsafeFileError, match="pickle"):
            call()
    ck_path, _ = _crafted(tmp_path, "checkpoint", stealthy, cls_name)
    ck_nbce, _ = _crafted(tmp_path, "checkpoint", stealthy,
                          cls_name.replace("bce", "nbce").replace("BCE", "NBCE"))
    with pytest.raises(persistence.UnsafeFileError, match="pickle"):
        ck.BCE(n_clusters=2, n_init=1, max_iter=5).fit(LABELS, resume_from=ck_path)
    with pytest.raises(persistence.UnsafeFileError, match="pickle"):
        ck.NBCE(4, n_samples=5, burn_in=2, n_chains=1).fit(LABELS, resume_from=ck_nbce)
    with pytest.raises(persistence.UnsafeFileError):
        persistence.load_checkpoint(ck_path)
    assert not sentinel.exists()


def _v2_file(path, tree, arrays, cls_name="consensuskit.models.bce.estimator:BCE",
             kind="estimator", allow_pickle=False):
    buf = io.BytesIO()
    np.savez(buf, **arrays) if not allow_pickle else np.savez(buf, allow_pickle=True, **arrays)
    body = json.dumps(tree).encode() + b"\n" + buf.getvalue()
    header = {"format_version": 2, "class": cls_name, "kind": kind,
              "sha256": hashlib.sha256(body).hexdigest(), "n_bytes": len(body)}
    path.write_bytes(persistence.MAGIC + json.dumps(header).encode() + b"\n" + body)


@pytest.mark.parametrize("attack", ["object_array", "class_os", "fn_os", "fn_package",
                                    "header_class", "constraint_module"])
def test_new_format_cannot_name_code(tmp_path, attack):
    """Crafted version-2 files: pickled arrays, foreign classes or functions are refused."""
    sentinel = tmp_path / "ran"
    est = ck.BCE(n_clusters=2, n_init=1, max_iter=5, random_state=0).fit(LABELS)
    good = tmp_path / "good.ck"
    est.save(good)
    _, _, _, _, body = persistence._read_header(good)
    tree_line, _, npz = body.partition(b"\n")
    tree = json.loads(tree_line)
    with np.load(io.BytesIO(npz)) as z:
        arrays = {k: z[k] for k in z.files}
    cls_name = "consensuskit.models.bce.estimator:BCE"
    allow_pickle = False
    if attack == "object_array":
        arrays["a0"] = np.array([_RunsShell(f"touch {sentinel}")], dtype=object)
        allow_pickle = True
    elif attack == "class_os":
        tree["state"]["extra_"] = {"$": "obj", "class": "os:system", "state": {}}
    elif attack == "fn_os":
        tree["state"]["callback"] = {"$": "fn", "name": "os:system"}
    elif attack == "fn_package":  # a package function outside the model specs
        tree["state"]["callback"] = {"$": "fn", "name": "consensuskit.io.persistence:save"}
    elif attack == "header_class":
        cls_name = "os:system"
    else:
        tree["state"]["extra_"] = {"$": "constraint", "module": "os", "name": "system"}
    path = tmp_path / "bad.ck"
    _v2_file(path, tree, arrays, cls_name, allow_pickle=allow_pickle)
    with pytest.raises(ValueError):
        persistence.load(path)
    assert not sentinel.exists()


# ------------------------------------------------------------ exact round trips
def assert_same(a, b, path="est"):
    """Deep equality of two saved/loaded values (arrays bit for bit, types kept)."""
    if isinstance(a, torch.nn.Module):  # the default guide, rebuilt from the model
        assert type(a) is type(b), path
        return
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert a.flags.f_contiguous == b.flags.f_contiguous or a.ndim < 2, path
        if a.dtype.hasobject:
            for i, (x, y) in enumerate(zip(a.ravel(), b.ravel())):
                assert_same(x, y, f"{path}[{i}]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.requires_grad == b.requires_grad, path
        assert torch.equal(a, b) or (a.is_floating_point()
                                     and torch.equal(a.isnan(), b.isnan())), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, np.random.RandomState):
        assert_same(a.get_state(), b.get_state(), path)
    elif isinstance(a, np.random.Generator):
        assert_same(a.bit_generator.state, b.bit_generator.state, path)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), path
    elif dataclasses.is_dataclass(a) or (hasattr(a, "__dict__")
                                         and type(a).__module__.startswith("consensuskit")):
        own = any("__getstate__" in vars(c) for c in type(a).__mro__ if c is not object)
        state_a = a.__getstate__() if own else vars(a)
        state_b = b.__getstate__() if own else vars(b)
        assert_same(dict(state_a), dict(state_b), path)
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _every_estimator():
    from _factories import ESTIMATORS, make_fast

    cases = [(name, lambda name=name: make_fast(name)) for name in ESTIMATORS]
    # hub-backed fits (a nested PyroConsensus with its guide and param store)
    cases.append(("PyroConsensus", lambda: ck.PyroConsensus(
        ck.models.bce.model, n_clusters=2, num_steps=3, n_posterior_draws=2,
        n_perplexity_samples=2, random_state=0)))
    cases.append(("MM-svi", lambda: ck.MM(n_clusters=2, inference="svi", random_state=0,
                                          max_iter=3)))
    return cases


def _fit_for_save(factory):
    try:
        return factory().fit(LABELS)
    except TypeError as exc:  # pragma: no cover - an option missing in this version
        pytest.skip(str(exc))


@pytest.mark.parametrize("name, factory", _every_estimator(), ids=lambda x: x
                         if isinstance(x, str) else "")
def test_every_estimator_round_trips_exactly(tmp_path, name, factory):
    est = _fit_for_save(factory)
    est.random_state = np.random.RandomState(7)  # an RNG object as a hyper-parameter
    path = tmp_path / "m.ck"
    est.save(path)
    back = persistence.load(path)
    assert type(back) is type(est)
    assert_same(vars(est), vars(back))
    new = LABELS[::2]
    for method in ("predict", "predict_proba", "score_samples"):
        if hasattr(est, method):
            torch.manual_seed(0)
            want = getattr(est, method)(new)
            torch.manual_seed(0)
            np.testing.assert_array_equal(getattr(back, method)(new), want)


@pytest.mark.parametrize("name", ["BCE", "GBCE", "NBCE"])
def test_every_checkpoint_round_trips_exactly(tmp_path, name):
    snaps = []
    import copy

    def keep(state):
        snaps.append(copy.deepcopy(state))

    path = tmp_path / "run.ck"
    kw = {"truncation": 4, "n_samples": 3, "burn_in": 2} if name == "NBCE" else {
        "n_clusters": 2, "n_init": 2, "max_iter": 6, "tol": 0.0}
    est = getattr(ck, name)(random_state=1, callback=keep, checkpoint_path=path,
                            checkpoint_every=1, **kw)
    features = np.arange(len(LABELS), dtype=float)[:, None]
    est.fit(LABELS, **({"features": features} if name == "GBCE" else {}))
    saved = persistence.load_checkpoint(path, type(est))
    assert_same(saved["state"], snaps[-1], "checkpoint")
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_user_classes_and_models_need_allowed(tmp_path):
    """A user's Pyro model is stored by name and resolved only when the loader names it."""
    import pyro
    import pyro.distributions as dist

    def my_model(labels, n_labels, n_clusters):
        ck.models.bce.model(labels, n_labels, n_clusters)

    est = ck.PyroConsensus(my_model, n_clusters=2, num_steps=2, n_posterior_draws=1,
                           n_perplexity_samples=2, random_state=0)
    del pyro, dist
    with pytest.raises(persistence.UnsafeFileError, match="allowed"):
        est.save(tmp_path / "u.ck")
    est.save(tmp_path / "u.ck", allowed=[my_model])
    with pytest.raises(persistence.UnsafeFileError, match="not part of consensuskit"):
        persistence.load(tmp_path / "u.ck")
    back = persistence.load(tmp_path / "u.ck", allowed=[my_model])
    assert back.model is my_model


def test_no_temporary_left_and_stale_ones_cleared(tmp_path, fitted):
    path = tmp_path / "m.ck"
    stale = tmp_path / "m.ck.tmp-999999999-1"  # a writer that no longer runs
    stale.write_bytes(b"half")
    fitted.save(path)
    assert sorted(os.listdir(tmp_path)) == ["m.ck"]
