#!/usr/bin/env python3
"""tools/include-graph.py: refit's include graph by folder (docs/architecture.md).

Reads every .c / .cu / .h under the library's folders, cli/, bench/ and include/refit/, and
turns each
`#include "..."` into an arrow from the including file's folder to the folder that owns the
header: a folder's private header (`foo_int.h`) is its own; a public header
include/refit/X.h is owned by the folder that defines most of the functions it declares (a
header declaring none -- macros, types -- by the folder holding X.c, else core/). Prints the
arrows between folders with the files and headers behind them, every arrow that runs back
up the layer order, every circle (a strongly connected set of folders), and with --png FILE
draws the layers (ground floor at the bottom) with matplotlib.

    python3 tools/include-graph.py                 # the table
    /usr/bin/python3 tools/include-graph.py --png docs/architecture.png   # + the picture
                                                   # (Debian's python3-matplotlib)
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
            owner["refit/" + n] = home[0] if home else None
    # a header of types and macros alone with no .c of its name: an umbrella (refit.h) stands
    # with the highest folder it includes, anything else on the ground floor
    for h in [h for h, f in owner.items() if f is None]:
        incs = INCLUDE.findall(read(os.path.join(pub, h[len("refit/"):])))
        up = [owner.get(i) for i in incs if owner.get(i)]
        owner[h] = max(up, key=lambda f: RANK[f]) if up else "core"
    return owner


def graph(root):
    files = list(sources(root))
    owner = owners(root, files)
    # a public header is its owner's: what it includes counts as its owner's arrows
    pub = os.path.join(root, "include", "refit")
    files += [(owner["refit/" + n], os.path.join(pub, n))
              for n in sorted(os.listdir(pub)) if n.endswith(".h")]
    arrows = collections.defaultdict(set)  # (from, to) -> {"file -> header"}
    for folder, path in files:
        rel = os.path.relpath(path, root)
        for inc in INCLUDE.findall(read(path)):
            if inc.startswith("refit/"):
                to = owner.get(inc)
            elif "/" not in inc and os.path.exists(os.path.join(os.path.dirname(path), inc)):
                to = owner.get("refit/" + inc, folder) if path.startswith(pub) else folder
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


# where each folder's box stands: floors bottom to top, staggered so that arrows spread out
XPOS = {"core": 0.5, "topology": 0.22, "model": 0.78, "formats": 0.3, "transport": 0.7,
        "runtime": 0.5, "cli": 0.3, "bench": 0.7}


def draw(arrows, up, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    present = {a for a, _ in arrows} | {b for _, b in arrows}
    pos = {f: (XPOS.get(f, 0.5), y) for y, fs in enumerate(LAYERS) for f in fs if f in present}
    fig, ax = plt.subplots(figsize=(8, 9))
    for (a, b), why in sorted(arrows.items()):
        (x0, y0), (x1, y1) = pos[a], pos[b]
        bad = (a, b) in up
        skip = abs(y0 - y1)
        rad = (0.0 if skip <= 1 else 0.12 * skip) * (1 if x0 <= x1 else -1)
        ax.annotate("", xy=(x1, y1 + (0.2 if y1 < y0 else -0.2)),
                    xytext=(x0, y0 + (-0.2 if y1 < y0 else 0.2)),
                    arrowprops=dict(arrowstyle="-|>", lw=0.5 + 0.12 * min(len(why), 20),
                                    color="crimson" if bad else "0.5", shrinkA=2, shrinkB=2,
                                    connectionstyle="arc3,rad=%.2f" % rad))
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        ax.text(mx + rad * 0.5, my, str(len(why)), fontsize=7, color="0.35",
                ha="center", va="center")
    for f, (x, y) in pos.items():
        ax.add_patch(FancyBboxPatch((x - 0.12, y - 0.18), 0.24, 0.36,
                                    boxstyle="round,pad=0.02", fc="#e8f0fa", ec="#3b6ea5"))
        ax.text(x, y, f + "/", ha="center", va="center", fontsize=12, family="monospace")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, len(LAYERS) - 0.4)
    ax.axis("off")
    ax.set_title("refit: includes by folder, ground floor at the bottom\n"
                 "(numbers: includes behind each arrow; red: an arrow that runs back up)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


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
