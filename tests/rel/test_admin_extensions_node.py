"""lmq-admin peek, dead, requeue and virtual as a subprocess against a running node: an
in-process LMQNode whose Erlang distribution node serves the lmq_console functions, reached by
the admin exactly as a release's node is (etc/vm.args name and cookie)."""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from pylmq.cli.maint import ensure_epmd
from pylmq.core.clock import ManualClock
from pylmq.erlang import start_node
from pylmq.node import LMQNode, NodeOptions
from pylmq.node.console import register_extensions
from tests.api.api_helpers import Api, base_url

START = 1_800_000_000.0


@dataclass
class Admin:
    root: Path
    api: Api
    clock: ManualClock

    async def __call__(self, *args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pylmq.cli.admin", "--root", str(self.root), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[Admin]:
    ensure_epmd()
    name, cookie = f"admt{secrets.token_hex(4)}@127.0.0.1", f"c{secrets.token_hex(8)}"
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "vm.args").write_text(f"-name {name}\n-setcookie {cookie}\n")
    clock = ManualClock(START)
    node = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, store="memory"), clock=clock)
    await node.start()
    dist = await start_node(name, cookie)
    register_extensions(dist, node.manager)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
            yield Admin(tmp_path, Api(session, base_url(node)), clock)
    finally:
        await dist.stop()
        await node.stop()


async def test_peek_lists_records_pages_and_bodies(admin: Admin) -> None:
    ids = []
    for body in (b"first", b"second", b"third"):
        r = await admin.api.request("POST", "/messages/adm.peek", {"priority": "0"}, data=body)
        ids.append(r.json()["id"])
        admin.clock.advance(0.001)
    code, out, err = await admin("peek", "adm.peek", "-n", "2", "--body")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ID", "STATE", "RETRY"]
    assert lines[1].split()[:2] == [ids[0], "available"] and lines[2] == "  body: 'first'"
    assert lines[3].split()[0] == ids[1]
    assert lines[-1] == f"(more may follow: lmq-admin peek adm.peek --after {ids[1]})"
    code, out, _ = await admin("peek", "adm.peek", "--after", ids[1])
    assert out.splitlines()[1].split()[0] == ids[2] and "more may follow" not in out
    assert (await admin.api.pull("adm.peek")).body == b"first"  # peek delivered nothing


async def test_dead_and_requeue_show_and_move_dead_letters(admin: Admin) -> None:
    await admin.api.set_props("adm.jobs", dead_letter="adm.dead", retry=0, timeout=5)
    await admin.api.push("adm.jobs", b"job")
    assert (await admin.api.pull("adm.jobs")).status == 200
    admin.clock.advance(6)
    assert (await admin.api.pull("adm.jobs")).status == 204  # exhausted: moved to adm.dead
    code, out, err = await admin("dead", "adm.dead")
    assert code == 0, err
    [header, row] = out.splitlines()
    assert header.split()[:4] == ["ID", "ORIGIN", "FAILURES", "REASON"]
    assert row.split()[1:4] == ["adm.jobs", "1", "retries"]
    assert await admin("requeue", "adm.dead", "--to", "adm.again") == (0, "requeued 1 message\n", "")
    r = await admin.api.request("GET", "/peek/adm.again", {"body": "1"})
    assert [e["body"] for e in r.json()] == ["job"] and "dead" not in r.json()[0]


async def test_virtual_set_list_delete(admin: Admin) -> None:
    assert await admin("virtual", "set", "adm.v", "adm.v1", "adm.v2") == (0, "ok\n", "")
    assert await admin("virtual") == (0, "adm.v -> adm.v1, adm.v2\n", "")
    r = await admin.api.push("adm.v", b"x")
    assert set(r.json()["queues"]) == {"adm.v1", "adm.v2"}
    assert await admin("virtual", "delete", "adm.v") == (0, "ok\n", "")
    assert await admin("virtual", "list") == (0, "(no virtual queues)\n", "")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("virtual", "delete", "adm.nosuch"), "virtual delete failed: not_found: no virtual queue named 'adm.nosuch'"),
        (("virtual", "set", "adm.vq", "adm.vq"), "virtual set failed: bad_request"),
        (("peek", "adm.nosuch.queue"), "peek failed: queue_not_found"),
        (("peek", "adm.q", "--after", "not-an-id"), "peek failed: bad_request"),
        (("requeue", "adm.nosuch.dlq"), "requeue failed: queue_not_found"),
    ],
)
async def test_refusals_print_the_reason_and_exit_1(admin: Admin, args: tuple[str, ...], words: str) -> None:
    await admin.api.push("adm.q")
    code, out, err = await admin(*args)
    assert (code, out) == (1, ""), err
    assert words in err, err


async def test_a_virtual_name_in_peek_names_its_queues(admin: Admin) -> None:
    await admin("virtual", "set", "adm.fan", "adm.f1")
    code, _, err = await admin("peek", "adm.fan")
    assert code == 1 and "virtual queue: pull from its queues adm.f1" in err, err


async def test_without_a_node_the_admin_says_so(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "vm.args").write_text(f"-name nobody{secrets.token_hex(4)}@127.0.0.1\n-setcookie x\n")
    code, out, _ = await Admin(tmp_path, None, ManualClock())("peek", "q")  # type: ignore[arg-type]
    assert (code, out) == (1, "Node is not running!\n")
