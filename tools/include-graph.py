#!/usr/bin/env python3
"""tools/include-graph.py: refit's include graph by folder (docs/architecture.md).

Reads every .c / .cu / .h under the library's folders, cli/ and bench/, and turns each
`#include "..."` into an arrow from the including file's folder to the folder that owns the
header: a folder's private header (`foo_int.h`) is its own; a public header
include/refit/X.h is owned by the folder that defines most of the functions it declares (a
header declaring none -- macros, types -- by the folder holding X.c, else core/). Prints the
arrows between folders with the files and headers behind them, every arrow that runs back
up the layer order, every circle (a strongly connected set of folders), and with --png FILE
draws the layers (ground floor at the bottom) with matplotlib.

    python3 tools/include-graph.py                 # the table
    python3 tools/include-graph.py --png docs/architecture.png
"""
import argparse
import collections
import os
import re
import sys

# The layer order, ground floor first; a folder may include only folders at or below it.
LAYERS = [["core"], ["topology"], ["model"], ["formats"], ["transport"], ["runtime"],
          ["cli", "bench"]]
RANK = {f: i for i, fs in enumerate(LAYERS) for f in fs}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# a declaration or definition of an rf_ function at the start of a line (after its type)
FUNC = re.compile(r'^[A-Za-z_][\w\s\*]*?\b(rf_\w+)\s*\(', re.M)


def sources(root):
    for folder in RANK:
        d = os.path.join(root, folder)
        for dp, _, names in os.walk(d):
            for n in sorted(names):
                if n.endswith((".c", ".cu", ".h")):
                    yield folder, os.path.join(dp, n)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def definitions(text):
    """Functions defined (a line-start signature followed by a body, not a ';')."""
    out = set()
    for m in FUNC.finditer(text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            c = text[i]
            depth += c == "("
            depth -= c == ")"
            i += 1
            if depth == 0:
                break
        rest = text[i:i + 200].lstrip()
        if rest.startswith("{"):
            out.add(m.group(1))
    return out


def owners(root, files):
    defined = collections.defaultdict(collections.Counter)  # function -> folder counts
    for folder, path in files:
        if not path.endswith(".h"):
            for fn in definitions(read(path)):
                defined[fn][folder] += 1
    pub = os.path.join(root, "include", "refit")
    owner = {}
    for n in sorted(os.listdir(pub)):
        if not n.endswith(".h"):
            continue
        declared = set(FUNC.findall(read(os.path.join(pub, n))))
        votes = collections.Counter()
        for fn in declared:
            for folder, k in defined.get(fn, {}).items():
                votes[folder] += k
        if votes:
            owner["refit/" + n] = votes.most_common(1)[0][0]
        else:
            stem = n[:-2]
            home = [f for f, p in files if os.path.basename(p) in (stem + ".c", stem + ".cu")]
            owner["refit/" + n] = home[0] if home else "core"
    return owner


def graph(root):
    files = list(sources(root))
    owner = owners(root, files)
    arrows = collections.defaultdict(set)  # (from, to) -> {"file -> header"}
    for folder, path in files:
        rel = os.path.relpath(path, root)
        for inc in INCLUDE.findall(read(path)):
            if inc.startswith("refit/"):
                to = owner.get(inc)
            elif not "/" in inc and os.path.exists(os.path.join(os.path.dirname(path), inc)):
                to = folder
            else:
                to = None
            if to is not None and to != folder:
                arrows[(folder, to)].add("%s -> %s" % (rel, inc))
    return owner, arrows


def circles(arrows):
    """Strongly connected sets of more than one folder (Tarjan)."""
    adj = collections.defaultdict(list)
    for a, b in arrows:
        adj[a].append(b)
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
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

    for v in sorted(RANK):
        if v not in index:
            visit(v)
    return out


def draw(arrows, up, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    pos = {}
    for y, fs in enumerate(LAYERS):
        for i, f in enumerate(fs):
            pos[f] = ((i + 1) / (len(fs) + 1), y)
    fig, ax = plt.subplots(figsize=(7, 8))
    for (a, b), why in sorted(arrows.items()):
        (x0, y0), (x1, y1) = pos[a], pos[b]
        bad = (a, b) in up
        ax.annotate("", xy=(x1, y1 + 0.22), xytext=(x0, y0 - 0.22),
                    arrowprops=dict(arrowstyle="-|>", lw=0.6 + 0.15 * min(len(why), 12),
                                    color="crimson" if bad else "0.45",
                                    connectionstyle="arc3,rad=%.2f" % (0.25 if bad else 0.08)))
    for f, (x, y) in pos.items():
        ax.add_patch(FancyBboxPatch((x - 0.13, y - 0.2), 0.26, 0.4,
                                    boxstyle="round,pad=0.02", fc="#e8f0fa", ec="#3b6ea5"))
        ax.text(x, y, f + "/", ha="center", va="center", fontsize=12, family="monospace")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, len(LAYERS) - 0.4)
    ax.axis("off")
    ax.set_title("refit: includes by folder, ground floor at the bottom\n"
                 "(arrow width ~ number of includes; red: runs back up)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--png", help="write the picture here (needs matplotlib)")
    args = ap.parse_args()
    owner, arrows = graph(args.root)
    up = {(a, b) for a, b in arrows if RANK[b] > RANK[a]}
    print("public headers by owner:")
    by = collections.defaultdict(list)
    for h, f in sorted(owner.items()):
        by[f].append(h[len("refit/"):])
    for f in sorted(by, key=lambda f: RANK[f]):
        print("  %-10s %s" % (f + "/", " ".join(by[f])))
    print("\narrows between folders (includes):")
    for (a, b), why in sorted(arrows.items(), key=lambda k: (-RANK[k[0][0]], RANK[k[0][1]])):
        print("  %-10s -> %-10s %3d%s" % (a + "/", b + "/", len(why), "   RUNS BACK UP" if (a, b) in up else ""))
        if (a, b) in up:
            for w in sorted(why):
                print("      " + w)
    cs = circles(arrows)
    print("\narrows that run back up: %d; circles: %d" % (len(up), len(cs)))
    for c in cs:
        print("  circle: " + " <-> ".join(c))
    if args.png:
        draw(arrows, up, args.png)
        print("picture: " + args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
