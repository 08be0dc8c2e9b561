"""One typed :class:`Settings` object from ``etc/vm.args``, ``etc/app.config`` and flags.

Precedence, lowest first: built-in defaults (LMQ's), ``~/.erlang.cookie`` (cookie only, as
Erlang reads it when no ``-setcookie`` is given), ``app.config``, ``-App Key Value`` application
settings in vm.args (Erlang lets the command line override config files), the rest of
vm.args, and last the ``overrides`` mapping (command-line flags; ``None`` values mean "not
given").
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pylmq.config.consult import Atom, Term, parse_terms, proplist
from pylmq.config.lager import LagerConfig, lager_from_terms
from pylmq.config.vmargs import NameMode, VmArgs, parse_vm_args
from pylmq.core.manager import MAX_VIRTUAL_MEMBERS
from pylmq.core.names import validate_name
from pylmq.core.store import (
    DEFAULT_DATA_DIR,
    DEFAULT_DISK_RESERVE_BYTES,
    DEFAULT_FSYNC,
    DEFAULT_FSYNC_INTERVAL,
    DEFAULT_JOURNAL_MAX_BYTES,
    DEFAULT_PG_POOL_SIZE,
    DEFAULT_PG_TIMEOUT,
    DEFAULT_STORE,
    FSYNC_POLICIES,
    STORE_KINDS,
    FsyncPolicy,
    StoreKind,
)
from pylmq.errors import ConfigError, LMQError
from pylmq.wire.ports import DEFAULT_HTTP_PORT, DEFAULT_QS_PORT, DEFAULT_RPC_PORT, DEFAULT_SQS_PORT
from pylmq.wire.qs import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_REQUEST, DEFAULT_UDP_MAX, UDP_MAX_LIMIT

__all__ = ["FsyncPolicy", "Settings", "StoreKind", "load_settings", "read_cookie_file", "read_token_file"]


@dataclass(frozen=True, slots=True)
class Settings:
    http_host: str = "0.0.0.0"
    http_port: int = DEFAULT_HTTP_PORT
    rpc_host: str = "0.0.0.0"
    rpc_port: int = DEFAULT_RPC_PORT
    # queue_server's JSON protocol (TCP and UDP on one port): on by default, on the loopback
    # interface unless qs_host names another: a UDP answer can be a thousand times its request
    # and goes wherever the datagram claims to come from, so serving other hosts is a choice.
    qs_enabled: bool = True
    qs_host: str = "127.0.0.1"
    qs_port: int = DEFAULT_QS_PORT
    qs_max_request: int = DEFAULT_MAX_REQUEST  # bytes of one TCP request
    qs_udp_max: int = DEFAULT_UDP_MAX  # bytes of a request or answer datagram
    qs_idle_timeout: int = round(DEFAULT_IDLE_TIMEOUT * 1000)  # ms before an idle TCP connection closes
    # Amazon SQS's API: on by default, on the HTTP host unless sqs_host names another.
    sqs_enabled: bool = True
    sqs_host: str | None = None
    sqs_port: int = DEFAULT_SQS_PORT
    # Access key id -> secret ({sqs_access_keys, [{"AKID", "secret"}]}): when set, only requests
    # SigV4-signed with one of them are served; empty: any request (signed or not) is.
    sqs_access_keys: Mapping[str, str] = field(default_factory=dict)
    # None: not a distributed node (no -name/-sname), as erl without those flags.
    node_name: str | None = None
    name_mode: NameMode = "long"
    cookie: str | None = None
    hidden: bool = True  # pylmq always connects as a hidden node; -hidden is accepted
    net_ticktime: int = 60  # seconds; kernel's default, -kernel net_ticktime N in vm.args
    stats_interval: int = 20000  # ms between size/memory gauges; 0 disables them
    statsd_host: str = "localhost"
    statsd_port: int = 8125
    join: str | None = None  # node to join at start ({lmq, [{join, Node}]})
    lager: LagerConfig = field(default_factory=LagerConfig)
    log_dir: Path | None = None  # when set, every log file goes here (by its file name)
    store: StoreKind = DEFAULT_STORE
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    fsync: FsyncPolicy = DEFAULT_FSYNC
    fsync_interval: int = round(DEFAULT_FSYNC_INTERVAL * 1000)  # ms, for fsync=interval
    journal_max_bytes: int = DEFAULT_JOURNAL_MAX_BYTES  # durable store: pushes refused past it while compaction fails
    disk_reserve_bytes: int = DEFAULT_DISK_RESERVE_BYTES  # durable store: pushes refused below this much free space
    pg_dsn: str | None = None  # postgres store: the database ({pg_dsn, "postgresql://..."})
    pg_pool_size: int = DEFAULT_PG_POOL_SIZE  # postgres store: connections kept to the database
    pg_timeout: int = round(DEFAULT_PG_TIMEOUT * 1000)  # postgres store: ms one statement may take
    # Open connections each API (HTTP, MessagePack-RPC) accepts; 0: from the descriptor limit
    # (pylmq.api._limits.default_max_connections).
    max_connections: int = 0
    header_timeout: int = 30000  # ms from an HTTP request's first byte to the end of its head
    body_timeout: int = 30000  # ms an HTTP request body may go without a byte
    # Bytes of requests partly received (HTTP bodies, RPC frames) the node holds at most, both
    # APIs together; 0: from the memory (pylmq.api._limits.default_max_buffered).
    max_buffered_bytes: int = 0
    # Bytes/s a body or frame being received must average over each window of body_timeout.
    min_receive_rate: int = 1024
    # In a cluster: ms one call to an Erlang peer may take (pylmq.cluster.mnesia_store), and ms of silence
    # with a probe unanswered after which a peer is stalled (pylmq.erlang.connection).
    rpc_timeout: int = 5000
    stall_timeout: int = 3000
    vm_env: Mapping[str, str] = field(default_factory=dict)  # -env VAR VALUE from vm.args
    # Virtual queues of app.config ({virtual_queues, [{<<"v">>, [<<"a">>, <<"b">>]}]}): name ->
    # its real queues. The node binds each at start unless its journal already holds that name.
    virtual_queues: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The web console at /console/ ({console, false} turns it off).
    console: bool = True
    # http_auth ({http_auth, [{tokens, ["..."]}, {token_file, "path"}, {protect, mutating | all}]}):
    # the credential of the HTTP API and the console; none (the default) leaves them open, as LMQ is.
    http_tokens: tuple[str, ...] = field(default=(), repr=False)
    http_protect: str = "mutating"
    # Things read but without effect in pylmq (Erlang VM flags, InfluxDB, ...): for the log.
    notices: tuple[str, ...] = ()


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
_SCALAR_TYPES: dict[str, type] = {
    "http_host": str, "http_port": int, "rpc_host": str, "rpc_port": int, "node_name": str,
    "cookie": str, "hidden": bool, "net_ticktime": int, "stats_interval": int, "statsd_host": str,
    "statsd_port": int, "join": str, "log_dir": Path, "data_dir": Path, "fsync_interval": int,
    "journal_max_bytes": int, "disk_reserve_bytes": int, "pg_dsn": str, "pg_pool_size": int, "pg_timeout": int,
    "max_connections": int, "header_timeout": int, "body_timeout": int, "rpc_timeout": int,
    "stall_timeout": int, "max_buffered_bytes": int, "min_receive_rate": int,
    "qs_enabled": bool, "qs_host": str, "qs_port": int, "qs_max_request": int, "qs_udp_max": int,
    "qs_idle_timeout": int, "sqs_enabled": bool, "sqs_host": str, "sqs_port": int, "console": bool,
}  # fmt: skip
_CHOICES: dict[str, tuple[str, ...]] = {
    "name_mode": get_args(NameMode),
    "store": STORE_KINDS,
    "fsync": FSYNC_POLICIES,
}
_PORTS = ("http_port", "rpc_port", "statsd_port", "qs_port", "sqs_port")
_AT_LEAST: dict[str, int] = {
    "max_connections": 0, "header_timeout": 1, "body_timeout": 1, "journal_max_bytes": 0, "disk_reserve_bytes": 0,
    "rpc_timeout": 1, "stall_timeout": 0, "max_buffered_bytes": 0, "min_receive_rate": 0,
    "qs_max_request": 64, "qs_udp_max": 64, "qs_idle_timeout": 1, "pg_pool_size": 1, "pg_timeout": 1,
}  # fmt: skip
# The pylmq section's keys (app.config or -pylmq Key Value in vm.args).
_PYLMQ_KEYS = ("store", "data_dir", "fsync", "fsync_interval", "rpc_host", "log_dir", "max_connections",
               "header_timeout", "body_timeout", "journal_max_bytes", "disk_reserve_bytes", "rpc_timeout",
               "stall_timeout", "max_buffered_bytes", "min_receive_rate", "qs", "qs_max_request", "qs_udp_max",
               "qs_idle_timeout", "sqs", "sqs_access_keys", "pg_dsn", "pg_pool_size", "pg_timeout",
               "console")  # fmt: skip
# Override keys that are not Settings fields.
_EXTRA_OVERRIDES = ("cookie_file",)


def read_cookie_file(path: Path) -> str | None:
    """The cookie in ``path`` (``~/.erlang.cookie``), or None when there is no such file.

    Like Erlang, refuse a cookie file that others may read."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read cookie file: {e}") from e
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: cookie file must be accessible by owner only (chmod 400)")
    cookie = path.read_text(encoding="latin-1").strip()
    return cookie or None


def _coerce(key: str, value: Any, where: str, from_text: bool = False) -> Any:
    """Check (and for command-line text, convert) one setting's value."""
    if key in _CHOICES:
        text = value.name if isinstance(value, Atom) else value
        if text not in _CHOICES[key]:
            raise ConfigError(f"{where}: {key} must be one of {', '.join(_CHOICES[key])}, got {value!r}")
        return text
    typ = _SCALAR_TYPES.get(key)
    if typ is None:
        return value
    if typ is int:
        if from_text and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
        if key in _PORTS and not 0 <= value <= 65535:
            raise ConfigError(f"{where}: {key} must be a port number 0..65535, got {value}")
        if key in _AT_LEAST and value < _AT_LEAST[key]:
            raise ConfigError(f"{where}: {key} must be at least {_AT_LEAST[key]}, got {value}")
        return value
    if typ is bool:
        if from_text and isinstance(value, str) and value in ("true", "false"):
            value = value == "true"
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
        return value
    if isinstance(value, Atom):
        value = value.name
    elif isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, Path) and typ is Path:
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be text, got {value!r}")
    return Path(value) if typ is Path else value


def _virtual_name(value: Term, where: str) -> str:
    if not isinstance(value, bytes | str) or isinstance(value, Atom):
        raise ConfigError(f'{where}: a queue name must be a binary (<<"name">>) or a string, got {value!r:.80}')
    try:
        return validate_name(value)
    except LMQError as e:
        raise ConfigError(f"{where}: {e.detail}") from None


def _virtual_queues(value: Term, where: str) -> dict[str, tuple[str, ...]]:
    """``[{<<"v">>, [<<"a">>, <<"b">>]}]``: each virtual name once, 1 to MAX_VIRTUAL_MEMBERS
    distinct real queues, none of them virtual itself."""
    shape = '[{<<"virtual">>, [<<"queue">>, ...]}, ...]'
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected {shape}, got {value!r:.80}")
    out: dict[str, tuple[str, ...]] = {}
    for entry in value:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], list)):
            raise ConfigError(f'{where}: expected {{<<"virtual">>, [<<"queue">>, ...]}}, got {entry!r:.80}')
        name = _virtual_name(entry[0], where)
        at = f"{where} {name!r}"
        if name in out:
            raise ConfigError(f"{at}: the virtual queue is named twice")
        members = tuple(_virtual_name(m, at) for m in entry[1])
        if not 1 <= len(members) <= MAX_VIRTUAL_MEMBERS:
            raise ConfigError(f"{at}: a virtual queue binds 1 to {MAX_VIRTUAL_MEMBERS} queues, got {len(members)}")
        if len(set(members)) != len(members):
            raise ConfigError(f"{at}: a queue is bound twice")
        out[name] = members
    for name, members in out.items():
        inner = [m for m in members if m in out]
        if inner:
            raise ConfigError(f"{where} {name!r}: binds the virtual queue {inner[0]!r}; bind real queues only")
    return out


def _ip_text(value: Term, where: str) -> str:
    if isinstance(value, str):
        return value
    parts = [p for p in value if isinstance(p, int) and not isinstance(p, bool)] if isinstance(value, tuple) else []
    if isinstance(value, tuple) and len(parts) == len(value) == 4 and all(0 <= p <= 255 for p in parts):
        return ".".join(str(p) for p in parts)
    if isinstance(value, tuple) and len(parts) == len(value) == 8 and all(0 <= p <= 0xFFFF for p in parts):
        return ":".join(f"{p:x}" for p in parts)
    raise ConfigError(f"{where}: expected an IP address string or tuple, got {value!r}")


def _apply_qs(value: Term, acc: dict[str, Any], where: str, api: str = "qs") -> None:
    """``{qs, off}``, ``{qs, Port}`` or ``{qs, {Ip, Port}}``: queue_server's protocol (and the
    same forms for ``sqs``, the SQS API)."""
    if isinstance(value, Atom) and value.name in ("off", "false"):
        acc[f"{api}_enabled"] = False
        return
    if isinstance(value, tuple) and len(value) == 2:
        acc[f"{api}_host"] = _ip_text(value[0], where)
        value = value[1]
    acc[f"{api}_port"] = _coerce(f"{api}_port", value, where)
    acc[f"{api}_enabled"] = True


def _text(value: Term, where: str) -> str:
    if isinstance(value, bytes) and not isinstance(value, Atom):
        return value.decode("utf-8")
    if isinstance(value, str) and not isinstance(value, Atom):
        return value
    raise ConfigError(f'{where}: expected a string ("text") or a binary (<<"text">>), got {value!r:.80}')


def _access_keys(value: Term, where: str) -> dict[str, str]:
    """``[{"AKID", "secret"}, ...]``: SQS access key ids and their secrets."""
    if not isinstance(value, list):
        raise ConfigError(f'{where}: expected [{{"access key id", "secret"}}, ...], got {value!r:.80}')
    out: dict[str, str] = {}
    for entry in value:
        if not (isinstance(entry, tuple) and len(entry) == 2):
            raise ConfigError(f'{where}: expected {{"access key id", "secret"}}, got {entry!r:.80}')
        key, secret = _text(entry[0], where), _text(entry[1], where)
        if not key or not secret:
            raise ConfigError(f"{where}: an access key id and its secret cannot be empty")
        out[key] = secret
    return out


_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
HTTP_PROTECT = ("mutating", "all")


_TOKEN_RULE = "must be 16 to 256 characters of A-Z a-z 0-9 - . _ ~ + / (then =)"
MAX_TOKEN_FILE = 64 * 1024
"""Largest token file read: hundreds of tokens; anything larger is not a token file."""


def _check_token(token: str, what: str) -> str:
    # The message names the token by its place, never by its value: config errors are
    # printed and logged.
    if not 16 <= len(token) <= 256 or not _TOKEN68.fullmatch(token):
        raise ConfigError(f"{what} {_TOKEN_RULE}")
    return token


def read_token_file(path: Path, where: str) -> list[str]:
    """The tokens of ``path``: one a line; blank lines and lines starting with ``#`` are
    skipped. Like the cookie file, a token file others may read is refused; so is a missing
    one (http_auth names it: the node must not start open by mistake)."""
    try:
        # Non-blocking: a FIFO put there is refused below instead of hanging the start.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"{where}: {path} is not a regular file")
            if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(f"{where}: {path} must be accessible by its owner only (chmod 600)")
            data = f.read(MAX_TOKEN_FILE + 1)
    except OSError as e:
        raise ConfigError(f"{where}: cannot read token file {path}: {e.strerror or type(e).__name__}") from None
    if len(data) > MAX_TOKEN_FILE:
        raise ConfigError(f"{where}: {path} is larger than {MAX_TOKEN_FILE} bytes: not a token file")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: {path}: tokens are ASCII (A-Z a-z 0-9 - . _ ~ + / =)") from None
    tokens = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            tokens.append(_check_token(line, f"{where}: {path} line {n}:"))
    return tokens


def _http_auth(value: Term, where: str) -> tuple[tuple[str, ...], str]:
    """``[{tokens, ["..."]}, {token_file, "path"}, {protect, mutating | all}]``: the tokens (16
    to 256 characters of RFC 6750's token68), given and read from the file, and what they
    guard. Errors never quote a token: a config error is printed and logged."""
    if not isinstance(value, list) or not all(
        isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], Atom) for e in value
    ):
        raise ConfigError(f'{where}: expected [{{tokens, [...]}}, {{token_file, "path"}}, {{protect, mutating | all}}]')
    tokens: list[str] = []
    protect = "mutating"
    for entry in value:
        assert isinstance(entry, tuple) and isinstance(entry[0], Atom)
        key, item = entry[0].name, entry[1]
        if key == "tokens":
            if not isinstance(item, list) or not item:
                raise ConfigError(f'{where}.tokens: expected a non-empty list of strings ["..."]')
            for i, raw in enumerate(item, 1):
                try:
                    token = _text(raw, where)
                except ConfigError:
                    raise ConfigError(f"{where}.tokens: token {i} is not a string") from None
                tokens.append(_check_token(token, f"{where}.tokens: token {i}"))
        elif key == "token_file":
            path = Path(_text(item, f"{where}.token_file"))
            from_file = read_token_file(path, f"{where}.token_file")
            if not from_file:
                raise ConfigError(f"{where}.token_file: {path} holds no token")
            tokens += from_file
        elif key == "protect":
            if not isinstance(item, Atom) or item.name not in HTTP_PROTECT:
                raise ConfigError(f"{where}.protect: expected mutating or all, got {item!r:.80}")
            protect = item.name
        else:
            raise ConfigError(f"{where}: unknown key {key!r:.40} (known: tokens, token_file, protect)")
    if not tokens:
        raise ConfigError(f"{where}: no tokens given")
    return tuple(dict.fromkeys(tokens)), protect


def _apply_app(app: str, props: dict[str, Term], acc: dict[str, Any], notices: list[str], where: str) -> None:
    """Map one application's settings into ``acc`` (Settings field -> value)."""
    for key, value in props.items():
        kw = f"{where}.{key}"
        if app == "lmq":
            if key == "port":
                acc["rpc_port"] = _coerce("rpc_port", value, kw)
            elif key == "http":
                if not (isinstance(value, tuple) and len(value) == 2):
                    raise ConfigError(f"{kw}: expected {{Ip, Port}}, got {value!r}")
                acc["http_host"] = _ip_text(value[0], kw)
                acc["http_port"] = _coerce("http_port", value[1], kw)
            elif key == "stats_interval":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"{kw}: expected an integer (ms), got {value!r}")
                # LMQ starts the stats timer only for a positive integer.
                acc["stats_interval"] = max(value, 0)
            elif key == "join":
                acc["join"] = _coerce("join", value, kw)
            elif key == "virtual_queues":  # pylmq's; Erlang LMQ ignores keys it does not know
                acc["virtual_queues"] = _virtual_queues(value, kw)
            else:
                notices.append(f"{kw}: not used by pylmq; ignored")
        elif app == "statsderl":
            if key == "hostname":
                acc["statsd_host"] = _coerce("statsd_host", value, kw)
            elif key == "port":
                acc["statsd_port"] = _coerce("statsd_port", value, kw)
            else:
                notices.append(f"{kw}: not used by pylmq; ignored")
        elif app == "pylmq":
            if key == "virtual_queues":
                acc["virtual_queues"] = _virtual_queues(value, kw)
            elif key == "qs":
                _apply_qs(value, acc, kw)
            elif key == "sqs":
                _apply_qs(value, acc, kw, "sqs")
            elif key == "sqs_access_keys":
                acc["sqs_access_keys"] = _access_keys(value, kw)
            elif key == "http_auth":
                acc["http_tokens"], acc["http_protect"] = _http_auth(value, kw)
            elif key in _PYLMQ_KEYS:
                acc[key] = _coerce(key, value, kw)
            else:
                raise ConfigError(
                    f"{kw}: unknown pylmq setting (known: {', '.join(_PYLMQ_KEYS)}, virtual_queues, http_auth)"
                )


def _read_app_config(path: Path, acc: dict[str, Any], notices: list[str], depth: int = 0) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e}") from e
    terms = parse_terms(text, str(path))
    if len(terms) != 1 or not isinstance(terms[0], list):
        raise ConfigError(f"{path}: expected one term, a list of {{Application, [{{Key, Value}}]}}")
    for entry in terms[0]:
        if isinstance(entry, str):
            # sys.config may name further config files to merge (".config" may be left off).
            if depth >= 8:
                raise ConfigError(f"{path}: included config files nested too deep")
            nested = Path(entry if entry.endswith(".config") else entry + ".config")
            _read_app_config(nested, acc, notices, depth + 1)
            continue
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], Atom)):
            raise ConfigError(f"{path}: expected {{Application, [{{Key, Value}}]}}, got {entry!r}")
        app = entry[0].name
        where = f"{path}: {app}"
        if app == "lager":
            acc["lager"] = lager_from_terms(entry[1], where)
        elif app in ("lmq", "statsderl", "pylmq"):
            _apply_app(app, proplist(entry[1], where), acc, notices, where)
        elif app != "sasl":
            notices.append(f"{where}: application not used by pylmq; ignored")


def _apply_vm_args(vm: VmArgs, source: str, acc: dict[str, Any], notices: list[str]) -> None:
    notices.extend(vm.notices)
    for (app, key), text in vm.app_env.items():
        where = f"{source}: -{app} {key}"
        if app == "kernel" and key == "net_ticktime":
            acc["net_ticktime"] = _coerce("net_ticktime", text, where, from_text=True)
        elif app in ("lmq", "statsderl", "pylmq"):
            try:
                (value,) = parse_terms(text + ".", where)
            except ValueError:
                raise ConfigError(f"{where}: expected one Erlang term, got {text!r}") from None
            _apply_app(app, {key: value}, acc, notices, f"{source}: {app}")
        else:
            notices.append(f"{where}: application setting not used by pylmq; ignored")
    if vm.name is not None:
        acc["node_name"] = vm.name
        acc["name_mode"] = vm.name_mode
    if vm.cookie is not None:
        acc["cookie"] = vm.cookie
    if vm.env:
        acc["vm_env"] = dict(vm.env)


def _full_node_name(name: str, mode: NameMode) -> str:
    """``name@host``; a bare name gets this host's name, as erl does."""
    alive, _, host = name.partition("@")
    if not alive:
        raise ConfigError(f"node name {name!r} has no name before '@'")
    if not host:
        host = socket.getfqdn() if mode == "long" else socket.gethostname().split(".")[0]
    if mode == "short" and "." in host:
        raise ConfigError(f"short node name {name!r} cannot have a dotted host; use -name for long names")
    return f"{alive}@{host}"


def load_settings(
    vm_args_path: Path | None,
    app_config_path: Path | None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build :class:`Settings`; see the module docstring for precedence.

    ``overrides`` keys are :class:`Settings` field names (plus ``cookie_file``, the cookie file
    to read instead of ``~/.erlang.cookie``); values may be text as given on a command line.
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(overrides) - set(_FIELDS) - set(_EXTRA_OVERRIDES) - {"notices"}
    if unknown:
        raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
    acc: dict[str, Any] = {}
    notices: list[str] = []

    cookie_file = Path(overrides.get("cookie_file", Path.home() / ".erlang.cookie"))
    if app_config_path is not None:
        _read_app_config(app_config_path, acc, notices)
    if vm_args_path is not None:
        try:
            text = vm_args_path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"{vm_args_path}: cannot read: {e}") from e
        vm = parse_vm_args(text, str(vm_args_path), include=lambda p: Path(p).read_text(encoding="utf-8"))
        _apply_vm_args(vm, str(vm_args_path), acc, notices)
    for key, value in overrides.items():
        if key in _FIELDS and key != "notices":
            acc[key] = value if key == "lager" else _coerce(key, value, "command line", from_text=True)

    if acc.get("qs_udp_max", 0) > UDP_MAX_LIMIT:
        raise ConfigError(
            f"qs_udp_max must be at most {UDP_MAX_LIMIT} (the largest UDP payload), got {acc['qs_udp_max']}"
        )
    if acc.get("node_name") is not None:
        acc["node_name"] = _full_node_name(acc["node_name"], acc.get("name_mode", "long"))
        if acc.get("cookie") is None:
            # Erlang only needs the cookie file once it is distributed.
            acc["cookie"] = read_cookie_file(cookie_file)
    return Settings(**acc, notices=tuple(notices))
