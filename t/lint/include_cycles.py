#!/usr/bin/python3
"""
The stages of a request call each other in one direction only: the
include graph of src/http, src/store, src/state, src/worker, shm/,
lua-free-admin/ and the module file (a file includes the header of every
file it calls) must have no cycle.  The upstream and balancer callbacks nginx calls back are
not includes, so they do not count.  shm/ must include nothing from src/.

    t/lint/include_cycles.py        exit 0 when clean, 1 with each cycle
"""

import glob
import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

# headers of types only, included everywhere: not stages
SHARED = {"ngx_http_tokenbiryani", "ngx_http_tokenbiryani_shm",
          "ngx_http_tokenbiryani_zone", "ngx_http_tokenbiryani_strategy"}


def main():
    graph = {}
    bad = 0
    # the request's stages, the store, a worker's copy of state
    mod = ("src/http", "src/store", "src/store/redis", "src/state",
           "src/worker")
    files = (sum((glob.glob(os.path.join(TOP, d, "*.c")) for d in mod), [])
             + glob.glob(os.path.join(TOP, "shm/*.[ch]"))
             + glob.glob(os.path.join(TOP, "lua-free-admin/*.c"))
             + [os.path.join(TOP, "ngx_http_tokenbiryani_module.c")])
    http = {os.path.basename(h)
            for d in mod for h in glob.glob(os.path.join(TOP, d, "*.h"))}
    for f in files:
        text = open(f).read()
        stem = os.path.splitext(os.path.basename(f))[0]
        incs = re.findall(r'#include "(ngx_http_tokenbiryani\w*)\.h"', text)
        if "/shm/" in f:
            for i in incs:
                if i + ".h" in http:
                    print("%s includes %s.h from src/: the zone "
                          "knows no request" % (os.path.relpath(f, TOP), i))
                    bad = 1
        graph.setdefault(stem, set()).update(
            i for i in incs if i != stem and i not in SHARED)

    seen = set()

    def visit(n, path):
        nonlocal bad
        for m in sorted(graph.get(n, ())):
            if m in path:
                cyc = path[path.index(m):] + [m]
                key = tuple(sorted(set(cyc)))
                if key not in seen:
                    seen.add(key)
                    print("include cycle: " + " -> ".join(
                        c.replace("ngx_http_tokenbiryani_", "")
                        for c in cyc))
                    bad = 1
                continue
            visit(m, path + [m])

    for n in sorted(graph):
        visit(n, [n])

    if not bad:
        print("include graph: %d files, no cycle; shm/ knows no request"
              % len(graph))
    return bad


if __name__ == "__main__":
    sys.exit(main())
