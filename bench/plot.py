#!/usr/bin/env python3
"""bench/report.png from bench/report.json (written by `cargo bench -p agenthooks-e2e --bench opa`).

Left: the in-process decision cost (p50) against the number of hooks in the set, for both
engines and both input sizes. Right: throughput over HTTP at 16 connections (or the
nearest count measured), with the bare axum ceiling. Log x on both.

    /usr/bin/python3 bench/plot.py [report.json] [report.png]

Needs matplotlib (Debian: python3-matplotlib; scripts/install-deps.sh bench).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "report.json")
dst = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "report.png")
with open(src) as f:
    data = json.load(f)
opa = data.get("opa_version", "OPA")

COLORS = {"ours": "#1f77b4", "opa": "#d62728", "ceiling": "#555555"}
STYLES = {"small": "-", "256 KiB": "--"}


def per_event(row):
    return f"{row['rules']:,}\n({row['resolved']}/event)"


fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))

spread = [r for r in data["in_process"] if r["shape"] == "spread"]
one = [r for r in data["in_process"] if r["shape"] == "one-tenant"]
for engine, name in (("ours", "agenthooks"), ("opa", f"OPA {opa}")):
    for size in ("small", "256 KiB"):
        rows = sorted((r for r in spread if r["input"] == size), key=lambda r: r["rules"])
        if not rows:
            continue
        left.plot(
            [r["rules"] for r in rows],
            [r[engine]["p50_ns"] / 1e3 for r in rows],
            STYLES[size],
            marker="o",
            color=COLORS[engine],
            label=f"{name}, {size} input",
        )
    for r in one:
        left.plot(
            [r["rules"]],
            [r[engine]["p50_ns"] / 1e3],
            marker="s" if r["input"] == "small" else "D",
            fillstyle="none",
            markersize=9,
            linestyle="none",
            color=COLORS[engine],
            label=f"{name}, 1,000 in one tenant (10 selected), {r['input']}",
        )
left.set_xscale("log")
left.set_yscale("log")
rows = sorted((r for r in spread if r["input"] == "small"), key=lambda r: r["rules"])
left.set_xticks([r["rules"] for r in rows])
left.set_xticklabels([per_event(r) for r in rows])
left.set_xlabel("hooks in the set over 100 tenants (hooks resolved per event, every filter evaluated)")
left.set_ylabel("µs per decision (p50, log)")
left.set_title("In process: one decision from a parsed event")
left.grid(True, which="both", alpha=0.3)
left.legend(fontsize=7, loc="upper left")

http = [r for r in (data.get("http") or []) if r["input"] == "small"]
if http:
    conns = sorted({r["conns"] for r in http}, key=lambda c: abs(c - 16))[0]
    rows = sorted((r for r in http if r["conns"] == conns and r["shape"] == "spread"), key=lambda r: r["rules"])
    xs = [r["rules"] for r in rows]
    right.plot(xs, [r["ours"]["rps"] for r in rows], "-o", color=COLORS["ours"], label="agenthooks dispatcher")
    right.plot(xs, [r["opa"]["rps"] for r in rows], "-o", color=COLORS["opa"], label=f"opa run --server {opa}")
    right.plot(xs, [r["ceiling"]["rps"] for r in rows], ":", color=COLORS["ceiling"], label="bare axum ceiling")
    for r in (r for r in http if r["conns"] == conns and r["shape"] == "one-tenant"):
        right.plot([r["rules"]], [r["ours"]["rps"]], "s", fillstyle="none", markersize=9, color=COLORS["ours"],
                   label="agenthooks, 1,000 in one tenant (10 selected)")
        right.plot([r["rules"]], [r["opa"]["rps"]], "s", fillstyle="none", markersize=9, color=COLORS["opa"],
                   label="OPA, 1,000 in one tenant (10 selected)")
    right.set_xscale("log")
    right.set_xticks(xs)
    right.set_xticklabels([f"{x:,}" for x in xs])
    right.set_ylim(bottom=0)
    right.set_xlabel("hooks in the set over 100 tenants")
    right.set_ylabel("requests/s")
    right.set_title(f"Over HTTP on loopback: {conns} connections, small input")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=7, loc="lower left")
else:
    right.axis("off")

fig.suptitle(f"agenthooks vs OPA {opa}: decision cost against hook count", fontsize=12)
fig.tight_layout()
fig.savefig(dst, dpi=110)
print(dst)
