"""The membership record (data/cluster.json): written atomically, read back, refused when damaged."""

from __future__ import annotations

from pathlib import Path

import pytest

from pylmq.cluster import membership
from pylmq.cluster.membership import Membership
from pylmq.errors import ConfigError


def test_a_saved_membership_loads_back_and_forget_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "data" / membership.FILE_NAME  # the data dir may not exist yet
    m = Membership(("lmq1@10.0.0.1", "lmq2@10.0.0.2"), standalone=True)
    membership.save(path, m)
    assert membership.load(path) == m
    assert [p.name for p in path.parent.iterdir()] == [membership.FILE_NAME], "no temporary file may remain"
    membership.forget(path)
    assert membership.load(path) is None
    membership.forget(path)  # nothing to forget: no error


def test_saving_replaces_the_record_whole(tmp_path: Path) -> None:
    path = tmp_path / membership.FILE_NAME
    membership.save(path, Membership(("a@h", "b@h", "c@h")))
    membership.save(path, Membership(("a@h",)))
    assert membership.load(path) == Membership(("a@h",))


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json", "damaged cluster membership"),
        (b'{"nodes": []}', "non-empty list of alive@host"),
        (b'{"nodes": ["no-at-sign"]}', "non-empty list of alive@host"),
        (b'{"nodes": ["a@h"], "standalone": "yes"}', "standalone must be true or false"),
        (b'["a@h"]', "damaged cluster membership"),
        (b" " * (membership._MAX_BYTES + 1), "larger than 1 MiB"),
    ],
    ids=["not-json", "no-nodes", "bad-name", "bad-standalone", "not-an-object", "too-large"],
)
def test_a_damaged_record_is_a_clear_error_naming_the_file(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / membership.FILE_NAME
    path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        membership.load(path)
    assert str(path) in e.value.detail and why in e.value.detail, e.value.detail
