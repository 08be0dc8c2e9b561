"""Regex engines for queue-name patterns: Python's ``re``, the ``regex`` module (with its
``timeout``) and RE2 (``google-re2``), measured on what pylmq asks of them. The numbers behind
docs/decisions/regex-engine.md.

    python -m bench.studies.regex_engines [--quick]

1. catastrophic backtracking: time of one search of a hostile pattern, growing names;
2. compile: time (and for ``regex`` memory, in a child process) of normal and hostile patterns;
3. search: cost of one match of LMQ-style patterns against a queue name, from Python;
4. PCRE compatibility: which constructs each engine accepts and what it answers, next to what
   PCRE answers (Erlang's ``re:run``, as LMQ calls it, when ``erl`` is on the PATH);
5. RE2's cost bound: CPU per search of patterns built to keep every instruction of their
   program alive, by program size and memory budget, and the time to compile (or refuse) them.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import time
import timeit
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import re2
import regex

warnings.simplefilter("ignore", FutureWarning)  # re warns about "[[:digit:]]" (a nested set to it)

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.never_capture = True
_RE2_OPTIONS.max_mem = 1 << 20

TIMEOUT = 1.0  # the regex module's timeout in these runs (s)


def compile_with(engine: str, pattern: str) -> Any:
    if engine == "re":
        return re.compile(pattern)
    if engine == "regex":
        return regex.compile(pattern)
    return re2.compile(pattern, _RE2_OPTIONS)


def search_with(engine: str, compiled: Any) -> Callable[[str], Any]:
    if engine == "regex":
        return lambda name: compiled.search(name, timeout=TIMEOUT)
    return compiled.search  # type: ignore[no-any-return]


ENGINES = ("re", "regex", "re2")


def backtracking(quick: bool) -> None:
    print("## 1. one search of a hostile pattern (name: N x 'a' then '!'), ms")
    sizes = (16, 20, 22, 24) if quick else (16, 20, 22, 24, 26)
    for pattern in (r"(a+)+$", r"(a|aa)+$", r"^(a|a?)+$"):
        for engine in ENGINES:
            row = []
            for n in sizes:
                name = "a" * n + "!"
                search = search_with(engine, compile_with(engine, pattern))
                start = time.perf_counter()
                try:
                    search(name)
                    row.append(f"{(time.perf_counter() - start) * 1e3:9.2f}")
                except TimeoutError:
                    row.append(f" >{TIMEOUT * 1e3:.0f} (timeout)")
                if time.perf_counter() - start > 3:
                    row.append("  (stopped: longer names take longer still)")
                    break
            print(f"{pattern:12} {engine:6} N={sizes}: {' '.join(row)}")
        n = 254
        search = search_with("re2", compile_with("re2", pattern))
        start = time.perf_counter()
        search("a" * n + "!")
        print(f"{pattern:12} re2    N={n}: {(time.perf_counter() - start) * 1e3:.3f}")


_BOMB_CHILD = """
import resource, sys, time
import {module} as m
start = time.perf_counter()
try:
    m.compile(sys.argv[1])
    outcome = "compiled"
except Exception as e:
    outcome = "refused: " + str(e)[:60]
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(f"{{outcome}} in {{time.perf_counter() - start:.3f}} s, peak RSS {{rss}} MiB")
"""


def compile_costs(quick: bool) -> None:
    print("\n## 2. compile")
    names = "|".join(f"q{i}" for i in range(200))
    normal = [r"^foo/.*", r"[[:digit:]]+", r"^(log|audit)-\d{4}-\d{2}$", f"^({names})$"]
    for engine in ENGINES:
        costs = []
        for p in normal:
            # Every engine caches what it compiled: each round compiles a pattern not seen yet.
            variants = [f"{p}|zz{i}zz" for i in range(200)]
            start = time.perf_counter()
            for v in variants:
                compile_with(engine, v)
            costs.append((time.perf_counter() - start) / len(variants) * 1e6)
        print(f"{engine:6} normal patterns (us each): {' '.join(f'{c:8.1f}' for c in costs)}")
    bombs = [r"(?:a{1000}){1000}"] if quick else [r"(?:a{1000}){1000}", r"(?:(?:a{100}){100}){100}"]
    for pattern in bombs:
        for module in ("re", "regex", "re2"):
            try:
                out = subprocess.run(
                    [sys.executable, "-c", _BOMB_CHILD.format(module=module), pattern],
                    capture_output=True,
                    text=True,
                    timeout=20,
                )
                result = out.stdout.strip() or out.stderr.strip().splitlines()[-1]
            except subprocess.TimeoutExpired:
                result = "still compiling after 20 s (killed)"
            print(f"{pattern:28} {module:6} {result}")


def search_costs() -> None:
    print("\n## 3. one search from Python (ns), name 'orders/eu-west/000123'")
    name = "orders/eu-west/000123"
    for pattern in (r"^foo/.*", r"^orders/", r"[[:digit:]]+$", r"eu-(west|east)", ""):
        row = []
        searches = {engine: search_with(engine, compile_with(engine, pattern)) for engine in ENGINES}
        searches["regex, no timeout"] = regex.compile(pattern).search
        for label, search in searches.items():
            n = 50_000
            best = min(timeit.repeat(partial(search, name), number=n, repeat=3))
            row.append(f"{label} {best / n * 1e9:6.0f}")
        print(f"{pattern!r:18} " + "  ".join(row))


# (construct, pattern, name)
COMPAT = [
    ("POSIX class", r"^q[[:digit:]]+$", "q123"),
    ("negated POSIX class", r"^[[:^digit:]]+$", "abc"),
    ("\\d", r"^q\d+$", "q42"),
    ("anchors, .*", r"^foo/.*$", "foo/bar"),
    ("alternation", r"^(log|audit)-", "audit-1"),
    ("(?i)", r"(?i)^LOG", "log-1"),
    ("{m,n}", r"^a{2,3}$", "aaa"),
    ("\\Q...\\E", r"^\Qa.b\E$", "a.b"),
    ("\\x{hh}", r"^\x{41}", "A"),
    ("(?<name>...)", r"^(?<p>q)", "q1"),
    ("\\z", r"q\z", "q"),
    ("\\Z", r"q\Z", "q"),
    ("lookahead", r"^(?!tmp)", "tmp1"),
    ("lookbehind", r"(?<=a)b", "ab"),
    ("backreference", r"^(a)\1", "aa"),
    ("possessive", r"^a++$", "aa"),
    ("atomic group", r"^(?>a+)$", "aa"),
]


def _pcre_answers() -> list[str] | None:
    """What Erlang's re:run (PCRE, as LMQ calls it) answers for each COMPAT case."""
    erl = shutil.which("erl")
    if erl is None:
        return None

    def binary(s: str) -> str:
        return "<<" + ",".join(str(b) for b in s.encode()) + ">>"

    cases = ",".join(f"{{{binary(p)},{binary(n)}}}" for _, p, n in COMPAT)
    expr = (
        f'[io:format("~p~n", [case catch re:run(N, P, [{{capture, none}}]) of match -> match; nomatch -> '
        f"nomatch; _ -> refused end]) || {{P, N}} <- [{cases}]], halt()."
    )
    out = subprocess.run([erl, "-noshell", "-eval", expr], capture_output=True, text=True, timeout=60)
    lines = out.stdout.split()
    return lines if len(lines) == len(COMPAT) else None


def compat() -> None:
    print("\n## 4. PCRE constructs: match / nomatch / refused")
    pcre = _pcre_answers()
    print(f"{'construct':22} {'pattern':18} {'name':8} {'PCRE':8} " + " ".join(f"{e:8}" for e in ENGINES))
    for i, (what, pattern, name) in enumerate(COMPAT):
        row = []
        for engine in ENGINES:
            try:
                row.append("match" if search_with(engine, compile_with(engine, pattern))(name) else "nomatch")
            except Exception:
                row.append("refused")
        truth = pcre[i] if pcre else "n/a"
        print(f"{what:22} {pattern:18} {name:8} {truth:8} " + " ".join(f"{r:8}" for r in row))


def _costly(n: int) -> str:
    """An alternation of a[ab]{k}c: on a random name of a and b every instruction stays alive."""
    return "|".join(f"(?:a[ab]{{{k}}}c)" for k in range(1, n))


def program_costs(quick: bool) -> None:
    print("\n## 5. RE2: CPU per search (255-byte random a/b names, best of 3, ms) by program size")
    rng = random.Random(3)
    names = ["".join(rng.choice("ab") for _ in range(255)) for _ in range(10 if quick else 30)]
    budgets = (64 << 10, 256 << 10, 1 << 20, 4 << 20)
    print(f"{'n':>4} {'program':>8} " + " ".join(f"{b >> 10:>8}K" for b in budgets) + "   compile at each (ms)")
    for n in (10, 20, 30, 44, 60, 100, 140):
        row, compiles, size = [], [], "-"
        for budget in budgets:
            opts = re2.Options()
            opts.log_errors, opts.never_capture, opts.max_mem = False, True, budget
            started = time.thread_time()
            try:
                compiled = re2.compile(_costly(n), opts)
                size = str(max(compiled.programsize, compiled.reverseprogramsize))
            except re2.error:
                compiles.append(f"{(time.thread_time() - started) * 1e3:.1f}(refused)")
                row.append(f"{'-':>9}")
                continue
            compiles.append(f"{(time.thread_time() - started) * 1e3:.1f}")
            best = min(_cpu_per_search(compiled, names) for _ in range(3))
            row.append(f"{best * 1e3:9.2f}")
        print(f"{n:4} {size:>8} " + " ".join(row) + "   " + " ".join(compiles))


def _cpu_per_search(compiled: Any, names: list[str]) -> float:
    started = time.thread_time()
    for name in names:
        compiled.search(name)
    return (time.thread_time() - started) / len(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter names and fewer compile bombs")
    args = parser.parse_args()
    print(f"re2 {getattr(re2, '__version__', '?')}, regex {regex.__version__}, Python {sys.version.split()[0]}\n")
    backtracking(args.quick)
    compile_costs(args.quick)
    search_costs()
    compat()
    program_costs(args.quick)


if __name__ == "__main__":
    main()
