"""``python -m bench.studies.runner_eval``: what interpreting the queue runner costs an Erlang node.

pylmq loads nothing on the cluster's Erlang nodes: its queue runner (``pylmq.cluster.runner.SOURCE``)
runs in ``erl_eval``. This study measures what that costs against the same source compiled.
It uses one scratch node of the reference kit, in a cluster of its own; compiling a module there
is fine for a measurement and is never done on a cluster's node. It runs the runner both ways
on a queue of that node. A driver sends cycles of 8 pushes, then 8 pulls, then 8 acks, each
group in flight together (a runner batch of 8). It reports:

- the runner process's reductions per cycle;
- the node's CPU milliseconds for all the cycles (``statistics(runtime)``, the driver included,
  which is the same both ways);
- the wall time.

    python -m bench.studies.runner_eval [--cycles 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import re
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

from bench.refkit import RefNode, kit_missing_reason
from pylmq.cluster.runner import SOURCE

_DRIVER = """
{spawn}
Pid ! {{lmq_runner_init, node(), <<"q">>}},
lmq_lib:create(rq), Self = self(),
Item = {{[], <<"body">>}},
Go = fun(F, Args) -> R = make_ref(), Pid ! {{lmq_call, Self, R, lmq_lib, F, Args}}, R end,
Answers = fun Answers(0, Got) -> Got;
              Answers(N, Got) ->
                  receive
                      {{lmq_batch, _, _}} -> Answers(N, Got);
                      {{lmq_answers, L}} -> Answers(N - length(L), maps:merge(Got, maps:from_list(L)));
                      {{R, Res}} when is_reference(R) -> Answers(N - 1, Got#{{R => Res}})
                  end
          end,
Wait = fun(Rs) -> Got = Answers(length(Rs), #{{}}), [maps:get(R, Got) || R <- Rs] end,
Cycle = fun Cycle(0) -> ok; Cycle(K) ->
   Wait([Go(enqueue, [rq, Item, [{{accum, 0}}, {{retry, 2}}]]) || _ <- lists:seq(1, 8)]),
   Ms = Wait([Go(dequeue, [rq, 30]) || _ <- lists:seq(1, 8)]),
   Wait([Go(done, [rq, element(2, element(2, M))]) || M <- Ms]),
   Cycle(K - 1) end,
Cycle(20),
{{reductions, R0}} = process_info(Pid, reductions), {{T0, _}} = statistics(runtime),
W0 = erlang:monotonic_time(microsecond),
Cycle({groups}),
{{reductions, R1}} = process_info(Pid, reductions), {{T1, _}} = statistics(runtime),
W1 = erlang:monotonic_time(microsecond),
Pid ! stop, lmq_lib:delete(rq),
{{(R1 - R0) div {cycles}, T1 - T0, W1 - W0}}.
"""


def _erl_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _spawn(compiled: bool, module_file: Path) -> str:
    if compiled:
        return (
            f"{{ok, pylmq_runner_study, Bin}} = compile:file({_erl_string(str(module_file))}, [binary]),"
            ' {module, _} = code:load_binary(pylmq_runner_study, "study.erl", Bin),'
            " Pid = spawn(pylmq_runner_study, run, []),"
        )
    return (
        f"{{ok, Toks, _}} = erl_scan:string({_erl_string(SOURCE)}), {{ok, Exprs}} = erl_parse:parse_exprs(Toks),"
        " Pid = spawn(erl_eval, exprs, [Exprs, erl_eval:new_bindings()]),"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=2000, help="cycles measured per run (a multiple of 8)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    reason = kit_missing_reason()
    if reason is not None:
        print(f"runner_eval: {reason}", file=sys.stderr)
        return 2
    groups = max(1, args.cycles // 8)
    with tempfile.TemporaryDirectory(prefix="runner-eval-") as tmp:
        module_file = Path(tmp) / "pylmq_runner_study.erl"
        module_file.write_text(
            "-module(pylmq_runner_study).\n-export([run/0]).\nrun() ->\n" + SOURCE.strip().rstrip(".") + ".\n"
        )
        node = RefNode("runnereval", "study" + secrets.token_hex(6), Path(tmp))
        node.start()
        try:
            rows: dict[str, list[tuple[int, int, int]]] = {"erl_eval": [], "compiled": []}
            print("way reductions_per_cycle node_cpu_ms wall_ms")
            for _ in range(args.runs):
                for way in rows:
                    spawn = _spawn(way == "compiled", module_file)
                    expr = _DRIVER.format(spawn=spawn, groups=groups, cycles=groups * 8)
                    out = node.eval(expr).replace(" ", "").replace("\n", "")
                    found = re.search(r"\{(\d+),(\d+),(\d+)\}", out)
                    if found is None:
                        print(f"runner_eval: unexpected answer: {out[-300:]}", file=sys.stderr)
                        return 1
                    reds, cpu_ms, wall_us = int(found[1]), int(found[2]), int(found[3])
                    rows[way].append((reds, cpu_ms, wall_us))
                    print(f"{way} {reds} {cpu_ms} {wall_us / 1000:.0f}", flush=True)
            med = {way: [statistics.median(r[k] for r in v) for k in range(3)] for way, v in rows.items()}
            extra = (med["erl_eval"][1] - med["compiled"][1]) / (groups * 8) * 1000
            print(
                f"\nmedians: erl_eval {med['erl_eval'][0]:.0f} reductions/cycle, {med['erl_eval'][1]:.0f} ms;"
                f" compiled {med['compiled'][0]:.0f} reductions/cycle, {med['compiled'][1]:.0f} ms"
            )
            print(f"interpreting the runner costs the node about {extra:.0f} µs of CPU per cycle (batches of 8)")
        finally:
            node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
