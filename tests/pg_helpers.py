"""A throwaway PostgreSQL server for tests: ``initdb`` in a temporary directory, ``pg_ctl`` on a
free port of 127.0.0.1, run as the ``postgres`` system user when the tests run as root
(PostgreSQL refuses to run as root). Debian's ``postgresql`` package provides the binaries
(``make test`` installs it when missing); ``$PG_BIN`` may name another bin directory."""

from __future__ import annotations

import concurrent.futures
import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DatabaseCopies", "PgServer", "pg_bin_dir", "pg_missing_reason", "serve_pg"]


def pg_bin_dir() -> Path | None:
    """The directory of initdb/pg_ctl/postgres: ``$PG_BIN``, else Debian's newest version."""
    env = os.environ.get("PG_BIN")
    if env:
        return Path(env) if (Path(env) / "initdb").exists() else None
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def pg_missing_reason() -> str | None:
    if pg_bin_dir() is None:
        return "PostgreSQL binaries (initdb, pg_ctl) not found: install Debian's postgresql package or set PG_BIN"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres system user to run PostgreSQL as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgServer:
    """One PostgreSQL cluster in a temporary directory. ``fsync`` off by default (tests); the
    bench turns it on. Each :meth:`new_database` is a fresh, empty database."""

    def __init__(
        self, *, fsync: bool = False, max_connections: int = 300, settings: dict[str, str] | None = None
    ) -> None:
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise RuntimeError(pg_missing_reason() or "no PostgreSQL")
        self.bin = bin_dir
        self.port = _free_port()
        self.user = "lmq"
        self._as: list[str] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="pylmq-pg-"))
        self.data = self.tmp / "data"
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.tmp, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.fsync = fsync
        self.options = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.tmp),
            "fsync": "on" if fsync else "off",
            "synchronous_commit": "on",
            "full_page_writes": "on" if fsync else "off",
            "max_connections": str(max_connections),
            **(settings or {}),
        }
        self._names = itertools.count(1)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8", "--no-sync")
        self.start()
        self.version_num = int(self.psql("SHOW server_version_num"))

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._as, str(self.bin / tool), *args], check=check, capture_output=True, text=True, timeout=120
        )

    @property
    def dsn(self) -> str:
        """The DSN of the ``postgres`` database (for creating others)."""
        return self.dsn_of("postgres")

    def dsn_of(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        opts = " ".join(f"-c {k}={v}" for k, v in self.options.items())
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.tmp / "log"), "-o", f"-p {self.port} {opts}", "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def kill9(self) -> None:
        """The postmaster killed with SIGKILL (its backends die with it); start() recovers."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)

    def psql(self, sql: str, database: str = "postgres") -> str:
        out = subprocess.run(
            [str(self.bin / "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.dsn_of(database), "-c", sql],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.strip()

    def new_database(self, template: str = "template0") -> str:
        """A fresh database, empty or a copy of ``template`` (a database no one is connected to); its DSN."""
        name = f"t{os.getpid()}_{next(self._names)}"
        # PostgreSQL 15's default strategy (WAL_LOG) writes every page of the template into the
        # WAL: about 0.5 s a database on 2 busy cores, once per test of the API suites under
        # --store postgres. FILE_COPY copies the files and checkpoints, which is cheap with
        # fsync off: measured 0.55 -> 0.21 s a copy of the migrated template (0.4 ->
        # 0.04 s of template0). The copy is the same either way.
        strategy = " STRATEGY FILE_COPY" if not self.fsync and self.version_num >= 150000 else ""
        self.psql(f"CREATE DATABASE {name} TEMPLATE {template}{strategy}")
        return self.dsn_of(name)

    def drop_database(self, dsn: str) -> None:
        """Drop a database of :meth:`new_database` (its DSN), closing what is still connected to it."""
        name = dsn.rsplit("/", 1)[1]
        self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        self.stop("immediate")
        with contextlib.suppress(OSError):
            shutil.rmtree(self.tmp)


class DatabaseCopies:
    """Fresh copies of ``template``, one for each test, each made while the test before runs.

    A copy takes a good part of a second on 2 busy cores, a test of the API suites often less:
    made on demand, the copies were on every test's path. One worker thread makes the next copy
    as soon as one is taken, and drops the databases given back, in order. A copy the thread
    could not make (the server was restarted under it) is made again on demand."""

    def __init__(self, server: PgServer, template: str) -> None:
        self.server, self.template = server, template
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pg-copies")
        self._next = self._copy()

    def _copy(self) -> concurrent.futures.Future[str]:
        return self._worker.submit(self.server.new_database, self.template)

    def take(self) -> str:
        """The DSN of a database no test has used."""
        ready, self._next = self._next, self._copy()
        try:
            return ready.result(timeout=120)
        except subprocess.SubprocessError:
            return self.server.new_database(self.template)

    def give_back(self, dsn: str) -> None:
        """Drop the database of ``dsn`` (a test's, its nodes stopped), after the copies asked for."""
        self._worker.submit(self.server.drop_database, dsn)

    def close(self) -> None:
        self._worker.shutdown(wait=True)


def serve_pg() -> Iterator[PgServer]:
    """The body of a fixture of one throwaway PostgreSQL (``yield from serve_pg()``): skips
    the test, with the reason, where it cannot run; closes the server after the last test."""
    import pytest  # here: bench/pg.py uses this module without pytest

    reason = pg_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    server = PgServer()
    try:
        yield server
    finally:
        server.close()
