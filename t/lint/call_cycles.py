#!/usr/bin/python3
"""
Which files call which, read from the object files' symbols (nm): a file
that uses a function another file defines calls it, whatever header
declared it (data - the module's own struct, tables - is not a call).  A
cycle is a loop the include-cycle lint cannot see when one header
declares many files' functions.

    t/lint/call_cycles.py [BUILD_DIR]   exit 0 when clean, 1 with each loop

(make analyze gives it the scan-build tree it has just compiled afresh.)

The whole module is one graph (src/core, src/http, shm, lua-free-admin,
the module file; the example strategy is a module of its own).  KNOWN
would list loops being taken apart, printed as known; any other fails.
"""

import collections
import glob
import os
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

# the files of each loop known today ("folder/stem"): none
KNOWN = []


def stem(path):
    s = os.path.splitext(os.path.basename(path))[0]
    return s.replace("ngx_http_tokenbiryani_", "")


def symbols(obj):
    out = subprocess.run(["nm", "--defined-only", "-g", obj],
                         capture_output=True, text=True).stdout
    defined = {ln.split()[-1] for ln in out.splitlines()
               if ln.split() and ln.split()[-2] == "T"}
    out = subprocess.run(["nm", "-u", obj], capture_output=True,
                         text=True).stdout
    used = {ln.split()[-1] for ln in out.splitlines() if ln.split()}
    return defined, used


def sccs(graph):
    """Tarjan's strongly connected components of more than one node"""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "build")
    objs = [o for o in glob.glob(os.path.join(build, "addon", "**", "*.o"),
                                 recursive=True)
            if "example_strategy" not in o]          # a module of its own
    if not objs:
        print("call_cycles: no object files under %s/addon: build first"
              % build)
        return 1

    bad = check(objs, "the module") | check(cli_objects(build), "the CLI")
    return bad


def cli_objects(build):
    """the command's files, compiled on their own (its build links them
    in one step)"""
    out = os.path.join(build, "lint", "cli")
    os.makedirs(out, exist_ok=True)
    objs = []
    for c in sorted(glob.glob(os.path.join(TOP, "src", "cli", "*.c"))):
        o = os.path.join(out, os.path.basename(c)[:-2] + ".o")
        subprocess.run(["cc", "-c", "-w", "-std=c99", "-D_GNU_SOURCE",
                        "-DTBC_MODULE=\"\"",
                        "-I" + os.path.join(TOP, "src", "cli"),
                        "-I" + os.path.join(TOP, "src", "core"),
                        "-o", o, c], check=True)
        objs.append(o)
    return objs


def check(objs, what):
    def name(o):
        return "%s/%s" % (os.path.basename(os.path.dirname(o)), stem(o))

    owner = {}
    uses = {}
    for o in objs:
        d, u = symbols(o)
        for s in d:
            owner[s] = name(o)
        uses[name(o)] = u
    graph = collections.defaultdict(set)
    for f, u in uses.items():
        graph[f]
        for s in u:
            g = owner.get(s)
            if g and g != f:
                graph[f].add(g)

    bad = 0
    loops = 0
    known = [set(k) for k in KNOWN]
    for comp in sccs(graph):
        loops += 1
        if any(set(comp) <= k for k in known):
            print("call loop (known, being taken apart): %s" % " ".join(comp))
            continue
        # who calls whom inside it, to see where to cut
        edges = ["%s->%s" % (a, b) for a in comp
                 for b in sorted(graph[a]) if b in comp]
        print("call loop: %s\n  %s" % (" ".join(comp), " ".join(edges)))
        bad = 1
    if not bad:
        print("call graph of %s: %d files, %s" % (
            what, len(graph), "no loop" if not loops
            else "%d known loop(s), no new one" % loops))
    return bad


if __name__ == "__main__":
    sys.exit(main())
