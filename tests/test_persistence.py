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

