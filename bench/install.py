"""Debian packages the bench needs, installed with apt-get when a binary is absent."""

from __future__ import annotations

import os
import shutil
import subprocess

__all__ = ["PACKAGES", "ensure", "have"]

# binary -> Debian package that provides it
PACKAGES = {
    "wrk": "wrk",
    "nginx": "nginx-light",
    "redis-server": "redis-server",
    "rabbitmq-server": "rabbitmq-server",
}

_updated = False


def have(binary: str) -> str | None:
    return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/lib/rabbitmq/bin")


def ensure(binary: str, *, allow_install: bool, timeout: float = 600.0) -> str | None:
    """The binary's path, installing its package first when allowed; None if unavailable."""
    path = have(binary)
    if path is not None or not allow_install:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None
    global _updated
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        if not _updated:
            subprocess.run(["apt-get", "update", "-qq"], env=env, timeout=timeout, check=False)
            _updated = True
        print(f"bench: installing {PACKAGES[binary]} (apt-get)", flush=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", PACKAGES[binary]],
            env=env,
            timeout=timeout,
            check=False,
            stdout=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None
    return have(binary)
