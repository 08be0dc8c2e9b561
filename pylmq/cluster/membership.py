"""The cluster a pylmq node belongs to, kept in its data directory across restarts.

An Erlang LMQ node remembers its cluster in its Mnesia schema; a pylmq node holds no Mnesia,
so it keeps ``cluster.json`` in its data directory instead::

    {"nodes": ["lmq@10.0.0.1", "lmq@10.0.0.2"], "standalone": false}

``nodes`` are the cluster's Erlang nodes (the one joined first, then those learned from the
cluster); ``standalone`` is true once the operator chose to serve alone (``lmq-admin
standalone``). The file is written at join (and when the cluster gains a node), replaced
atomically so that a crash leaves the old record or the new one, and removed at leave.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pylmq.errors import ConfigError

__all__ = ["FILE_NAME", "Membership", "forget", "load", "save"]

FILE_NAME = "cluster.json"
_MAX_BYTES = 1 << 20  # a record of a few node names; anything larger is not ours


@dataclass(frozen=True, slots=True)
class Membership:
    nodes: tuple[str, ...]
    standalone: bool = False


def load(path: Path) -> Membership | None:
    """The record, or None when the node belongs to no cluster. A damaged record is an error
    the operator must see (a guess could split the cluster or drop the membership)."""
    try:
        with path.open("rb") as f:
            raw = f.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"cannot read the cluster membership {path}: {e.strerror or e}") from e
    try:
        if len(raw) > _MAX_BYTES:
            raise ValueError("larger than 1 MiB")
        doc = json.loads(raw)
        nodes = doc["nodes"]
        standalone = doc.get("standalone", False)
        if not (isinstance(nodes, list) and nodes and all(isinstance(n, str) and "@" in n for n in nodes)):
            raise ValueError("nodes must be a non-empty list of alive@host names")
        if not isinstance(standalone, bool):
            raise ValueError("standalone must be true or false")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(
            f"{path}: damaged cluster membership ({e}); fix it, or remove it to start outside the cluster"
        ) from e
    return Membership(tuple(nodes), standalone)


def save(path: Path, m: Membership) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps({"nodes": list(m.nodes), "standalone": m.standalone}, indent=1).encode() + b"\n"
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_dir(path.parent)


def forget(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        _sync_dir(path.parent)


def _sync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
