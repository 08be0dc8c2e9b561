"""What the bench measures: pylmq in each store mode, an external LMQ, the no-op ceiling and the
brokers users would pick instead. Each target starts its server on 127.0.0.1 with temporary
config and data, in its own process group, and stops it at the end.

Adding a target: subclass :class:`Target` (``start``, ``addr``, optional ``stop``/``usage``),
and add a factory to :data:`TARGETS` (name -> callable taking the :class:`Env`); another pylmq
configuration is ``Pylmq(env, store, fsync, name=..., extra_args=[...])``.

``gen_procs`` is how many Python generator processes drive a target over its non-HTTP
protocols: the brokers get more than pylmq, since a Python client spends more CPU per message
than Redis or RabbitMQ do and one process would measure itself (each cell says whether its
generator was saturated all the same: bench/model.py ``saturation``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.install import ensure
from bench.model import Skip
from bench.procs import GroupUsage, Proc, free_port, group_usage, wait_port
from bench.refkit import HOST, KIT, RefNode, kit_missing_reason

__all__ = ["TARGETS", "Env", "Target"]


@dataclass
class Env:
    """Where a run keeps its scratch files, and what it may do."""

    scratch: Path
    allow_install: bool  # the reference brokers (RabbitMQ, Redis)
    allow_tools: bool  # the small tools every run needs (nginx for the ceiling)
    lmq_url: str | None = None  # an external LMQ (HTTP), e.g. the original Erlang LMQ
    lmq_rpc: str | None = None  # its MessagePack-RPC address HOST:PORT, if any
    lmq_rpc_oldspec: bool = True  # speak old-spec msgpack (no str8/bin) to it, as every original LMQ needs
    lmq_pid: int | None = None  # the OS pid of its server (beam.smp), for RSS and CPU


class Target:
    name = "target"
    kind = "lmq"  # lmq (speaks LMQ's APIs), ceiling, rabbitmq, redis
    protocols: tuple[str, ...] = ()
    proc: Proc | None = None
    rpc_oldspec = False  # its RPC clients pack old-spec msgpack (bench/drivers.py RpcDriver)
    gen_procs = 2  # Python generator processes per cell (one per core of the 2-core reference machine)

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def addr(self, protocol: str) -> Any:
        raise NotImplementedError

    def url(self) -> str:
        host, port = self.addr("http")
        return f"http://{host}:{port}"

    def usage(self) -> GroupUsage | None:
        return self.proc.usage() if self.proc is not None else None

    def info(self) -> dict[str, Any]:
        return {}


def _deb_version(package: str) -> str | None:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _wait_started(proc: Proc, port: int, seconds: float, what: str) -> None:
    if not wait_port(port, time.monotonic() + seconds, proc.popen):
        tail = proc.tail()
        proc.stop()
        raise Skip(f"{what} did not start within {seconds:.0f}s: {tail[-400:]}")


# -- pylmq --------------------------------------------------------------------------------------------


class Pylmq(Target):
    kind = "lmq"
    protocols = ("http", "rpc")

    def __init__(
        self, env: Env, store: str, fsync: str = "always", *, name: str | None = None, extra_args: Sequence[str] = ()
    ) -> None:
        self.env = env
        self.store = store
        self.fsync = fsync
        self.extra_args = tuple(extra_args)  # more ``python -m pylmq`` options of this configuration
        self.name = name or ("pylmq-memory" if store == "memory" else f"pylmq-durable-{fsync}")
        self.http_port = self.rpc_port = self.qs_port = self.sqs_port = 0

    def start(self) -> None:
        if self.store == "durable":
            try:
                import pylmq.store.durable  # noqa: F401
            except ImportError as e:
                raise Skip(f"the durable store is not available: {e}") from e
        data = self.env.scratch / self.name
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        self.http_port, self.rpc_port, self.qs_port = free_port(), free_port(), free_port()
        # SQS on a free port too: its default (9324) may be taken, by another node or ElasticMQ.
        self.sqs_port = free_port()
        argv = [
            sys.executable, "-m", "pylmq", "--http", f"127.0.0.1:{self.http_port}",
            "--rpc", f"127.0.0.1:{self.rpc_port}", "--qs", f"127.0.0.1:{self.qs_port}",
            "--sqs", f"127.0.0.1:{self.sqs_port}",
            "--store", self.store, "--data-dir", str(data / "data"),
            "--fsync", self.fsync, "--log-level", "warning", "--statsd", "off", "--stats-interval", "0",
            *self.extra_args,
        ]  # fmt: skip
        # Run in the scratch directory: no etc/ or log/ of the checkout is read or written.
        self.proc = Proc(argv, name=self.name, log=data / "server.log", cwd=data)
        _wait_started(self.proc, self.http_port, 30, self.name)
        if not wait_port(self.rpc_port, time.monotonic() + 10, self.proc.popen):
            raise Skip(f"{self.name}: RPC port not open")

    def addr(self, protocol: str) -> Any:
        return ["127.0.0.1", self.http_port if protocol == "http" else self.rpc_port]

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"store": self.store, "fsync": self.fsync, "log_level": "warning", "statsd": "off"}
        if self.extra_args:
            info["args"] = list(self.extra_args)
        return info


# -- an LMQ somewhere else (the original Erlang LMQ) -----------------------------------------------------


class ExternalLmq(Target):
    """The original Erlang LMQ: the one at ``--lmq-url`` (its RSS and CPU are those of
    ``--lmq-pid`` if given), else a node of the reference kit (bench/refkit.py) started for the
    run, whose beam.smp pid the kit records."""

    name = "lmq-external"
    kind = "lmq"

    def __init__(self, env: Env) -> None:
        self.env = env
        self.protocols = ("http", "rpc") if env.lmq_rpc else ("http",)
        self.rpc_oldspec = env.lmq_rpc_oldspec
        self.node: RefNode | None = None

    def start(self) -> None:
        if not self.env.lmq_url:
            self._start_kit_node()
            return
        u = urlsplit(self.env.lmq_url)
        try:
            socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=5).close()
        except OSError as e:
            raise Skip(f"{self.env.lmq_url} is not reachable: {e}") from e
        pid = self.env.lmq_pid
        if pid is not None and not Path(f"/proc/{pid}").exists():
            raise Skip(f"--lmq-pid {pid} is no running process")

    def _start_kit_node(self) -> None:
        reason = kit_missing_reason()
        if reason is not None:
            raise Skip(f"no --lmq-url given, and {reason}")
        node = RefNode("benchlmq", secrets.token_hex(8), self.env.scratch / "lmq-kit")
        try:
            node.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            raise Skip(f"the reference kit's LMQ node did not start: {str(e)[-400:]}") from e
        self.node = node
        self.protocols = ("http", "rpc")
        self.rpc_oldspec = True  # msgpack-erlang 0.2.3: old spec only

    def stop(self) -> None:
        if self.node is not None:
            self.node.stop()
            self.node = None

    def _pid(self) -> int | None:
        return self.node.pid() if self.node is not None else self.env.lmq_pid

    def addr(self, protocol: str) -> Any:
        if self.node is not None:
            return [HOST, self.node.http if protocol == "http" else self.node.rpc]
        if protocol == "http":
            u = urlsplit(self.env.lmq_url or "")
            return [u.hostname or "127.0.0.1", u.port or 80]
        assert self.env.lmq_rpc is not None
        host, _, port = self.env.lmq_rpc.rpartition(":")
        return [host or "127.0.0.1", int(port)]

    def usage(self) -> GroupUsage | None:
        pid = self._pid()
        # A pid that is gone (or was never there) reports nothing rather than zeros.
        if pid is None or not Path(f"/proc/{pid}").exists():
            return None
        return group_usage([pid])

    def info(self) -> dict[str, Any]:
        if self.node is not None:
            return {
                "kit": str(KIT),
                "url": self.node.url,
                "rpc": f"{HOST}:{self.node.rpc}",
                "rpc_msgpack": "old spec (raw, no str8/bin)",
                "pid": self.node.pid(),
            }
        return {
            "url": self.env.lmq_url,
            "rpc": self.env.lmq_rpc,
            "rpc_msgpack": "old spec (raw, no str8/bin)" if self.rpc_oldspec else "current spec",
            "pid": self.env.lmq_pid,
        }


# -- the ceiling: an HTTP responder that does no work ------------------------------------------------


_NGINX_CONF = """\
worker_processes auto;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            add_header x-lmq-message-id 00000000-0000-4000-8000-000000000000 always;
            return 204;
        }}
    }}
}}
"""


class Ceiling(Target):
    """nginx answering 204 (with a message-id header, so the LMQ scripts run unchanged)."""

    name = "ceiling-nginx"
    kind = "ceiling"
    protocols = ("http",)

    def __init__(self, env: Env) -> None:
        self.env = env
        self.port = 0

    def start(self) -> None:
        nginx = ensure("nginx", allow_install=self.env.allow_tools)
        if nginx is None:
            raise Skip("nginx is not installed")
        d = self.env.scratch / self.name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        self.port = free_port()
        (d / "nginx.conf").write_text(_NGINX_CONF.format(dir=d, port=self.port))
        self.proc = Proc([nginx, "-p", str(d), "-c", str(d / "nginx.conf")], name=self.name, log=d / "stderr.log")
        _wait_started(self.proc, self.port, 15, "nginx")

    def addr(self, protocol: str) -> Any:
        return ["127.0.0.1", self.port]

    def info(self) -> dict[str, Any]:
        return {"nginx": _deb_version("nginx-light") or _deb_version("nginx"), "workers": os.cpu_count()}


# -- RabbitMQ -----------------------------------------------------------------------------------------


class RabbitMQ(Target):
    name = "rabbitmq"
    kind = "rabbitmq"
    protocols = ("amqp",)
    gen_procs = 4  # aio-pika spends more CPU per message than RabbitMQ

    def __init__(self, env: Env) -> None:
        self.env = env
        self.port = 0

    def start(self) -> None:
        server = ensure("rabbitmq-server", allow_install=self.env.allow_install)
        if server is None:
            raise Skip("rabbitmq-server is not installed")
        # The Debian wrapper in /usr/sbin switches user; the one under /usr/lib runs as we are.
        lib = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
        if lib.exists():
            server = str(lib)
        d = self.env.scratch / self.name
        shutil.rmtree(d, ignore_errors=True)
        (d / "home").mkdir(parents=True)
        self.port, dist = free_port(), free_port()
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "disk_free_limit.absolute = 50MB\n"
            "vm_memory_high_watermark.relative = 0.4\n"
            "log.console = false\nlog.file.level = warning\n"
        )
        (d / "enabled_plugins").write_text("[].\n")
        node = f"bench{secrets.token_hex(4)}@localhost"
        env = dict(
            os.environ,
            HOME=str(d / "home"),
            RABBITMQ_NODENAME=node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(dist),
            RABBITMQ_CONFIG_FILE=str(d / "rabbitmq"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(d / "mnesia"),
            RABBITMQ_LOG_BASE=str(d / "log"),
            RABBITMQ_PID_FILE=str(d / "rabbit.pid"),
        )
        self.proc = Proc([server], name=self.name, log=d / "stdout.log", env=env)
        _wait_started(self.proc, self.port, 90, "rabbitmq")
        self.node = node

    def addr(self, protocol: str) -> Any:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def info(self) -> dict[str, Any]:
        return {
            "rabbitmq-server": _deb_version("rabbitmq-server"),
            "queues": "durable, persistent messages, publisher confirms, manual ack",
            "prefetch": 64,
        }


# -- Redis --------------------------------------------------------------------------------------------


class Redis(Target):
    name = "redis"
    kind = "redis"
    protocols = ("redis",)
    gen_procs = 4  # redis-py spends several times Redis's CPU per message

    def __init__(self, env: Env) -> None:
        self.env = env
        self.port = 0

    def start(self) -> None:
        server = ensure("redis-server", allow_install=self.env.allow_install)
        if server is None:
            raise Skip("redis-server is not installed")
        d = self.env.scratch / self.name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        self.port = free_port()
        argv = [
            server, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(d), "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no", "--maxclients", "10000",
            "--protected-mode", "no",
        ]  # fmt: skip
        self.proc = Proc(argv, name=self.name, log=d / "stdout.log")
        _wait_started(self.proc, self.port, 15, "redis")

    def addr(self, protocol: str) -> Any:
        return ["127.0.0.1", self.port]

    def info(self) -> dict[str, Any]:
        return {
            "redis-server": _deb_version("redis-server"),
            "pattern": "stream per queue, one consumer group: XADD, XREADGROUP, XACK+XDEL",
            "persistence": "appendonly yes, appendfsync everysec",
        }


TARGETS: dict[str, Callable[[Env], Target]] = {
    "memory": lambda env: Pylmq(env, "memory"),
    "durable-always": lambda env: Pylmq(env, "durable", "always"),
    "durable-interval": lambda env: Pylmq(env, "durable", "interval"),
    "durable-none": lambda env: Pylmq(env, "durable", "none"),
    "lmq": ExternalLmq,
    "ceiling": Ceiling,
    "rabbitmq": RabbitMQ,
    "redis": Redis,
}
