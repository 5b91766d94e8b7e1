#!/usr/bin/env bash
# The decision path of this tree against an earlier commit, side by side in one run:
# builds `dispatch_overhead` (release) at BASE in a cache outside the repo and here, runs
# the two binaries in alternating rounds, and prints for each scenario the median of
#   - the in-process engine cost (`Event::parse` + `decide` + serialize, p50 and mean µs), and
#   - the sequential HTTP p50 and mean as ratios to the bare axum baseline of the same binary,
# with HEAD ÷ BASE (1.00 = no change; issue 10 asks for at most 1.05 after the
# one-decision-core refactor).
#
# Usage: bench/before-after.sh [BASE] (default 312fd1b, the last commit before issue 10's
# decision core). Knobs: ROUNDS (default 3), AGENTHOOKS_BENCH_SECS (default 2).
set -euo pipefail
base=${1:-312fd1b}
rounds=${ROUNDS:-3}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
rev=$(git -C "$root" rev-parse --short=12 "$base^{commit}")
cache=${AGENTHOOKS_CACHE_DIR:-$HOME/.cache/agenthooks}/bench-base/$rev
mkdir -p "$cache"
if [ ! -f "$cache/src/Cargo.toml" ]; then
  rm -rf "$cache/src" && mkdir -p "$cache/src"
  git -C "$root" archive "$rev" | tar -x -C "$cache/src"
fi

# Prints the path of the dispatch_overhead bench binary built in $1 (target dir $2).
build() {
  (cd "$1" && CARGO_TARGET_DIR=$2 cargo bench -p agenthooks-dispatcher --bench dispatch_overhead \
    --no-run 2>&1) | tee /dev/stderr | sed -n 's/.*Executable .*(\(.*dispatch_overhead-[^)]*\)).*/\1/p' | tail -1
}
echo "[before-after] building BASE $rev and HEAD (release)" >&2
base_bin=$(build "$cache/src" "$cache/target")
head_bin=$(build "$root" "${CARGO_TARGET_DIR:-$root/target}")
case "$head_bin" in /*) ;; *) head_bin="$root/$head_bin" ;; esac
case "$base_bin" in /*) ;; *) base_bin="$cache/target/${base_bin#target/}" ;; esac
test -x "$base_bin" && test -x "$head_bin" || { echo "bench binaries not found" >&2; exit 1; }

out=$(mktemp -d)
export AGENTHOOKS_BENCH_SECS=${AGENTHOOKS_BENCH_SECS:-2}
for i in $(seq 1 "$rounds"); do
  for which in base head; do
    bin=${which}_bin
    echo "[before-after] round $i/$rounds: $which" >&2
    "${!bin}" --bench > "$out/$which-$i.md" 2>/dev/null
  done
done

python3 - "$out" "$rounds" "$rev" <<'EOF'
import re, statistics, sys, pathlib
out, rounds, rev = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def parse(text):
    """{scenario: (in-process p50 µs, in-process mean µs, sequential p50 × base, sequential mean × base)}"""
    seq, inproc, section = {}, {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            section = line
        if not line.startswith("| ") or "---" in line or line.startswith("| scenario"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if section and section.startswith("### Sequential"):
            seq[cells[0]] = (float(cells[8].rstrip("×")), float(cells[9].rstrip("×")))
        elif section and section.startswith("### In process"):
            inproc[cells[0]] = (float(cells[2]), float(cells[4]))
    return {s: inproc[s] + seq[s] for s in inproc if s in seq}

runs = {w: [parse((out / f"{w}-{i}.md").read_text()) for i in range(1, rounds + 1)] for w in ("base", "head")}
print(f"# decision path: HEAD vs {rev}, {rounds} alternating rounds, medians of the rounds\n")
print("Engine: in process (`Event::parse` + `decide` + serialize), µs per event. Seq: one")
print("keep-alive HTTP client, as a multiple of bare axum in the same binary. p50 is the robust")
print("figure; a mean over loopback hook calls carries their millisecond tails.\n")
print("| scenario | engine p50 BASE | engine p50 HEAD | ÷ | engine mean BASE | engine mean HEAD | ÷ | seq p50 × axum ÷ | seq mean × axum ÷ |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in runs["base"][0]:
    med = lambda w, k: statistics.median(r[s][k] for r in runs[w])
    pb, ph, mb, mh = med("base", 0), med("head", 0), med("base", 1), med("head", 1)
    qpb, qph, qmb, qmh = med("base", 2), med("head", 2), med("base", 3), med("head", 3)
    print(f"| {s} | {pb:.2f} | {ph:.2f} | {ph / pb:.2f} | {mb:.2f} | {mh:.2f} | {mh / mb:.2f} "
          f"| {qph / qpb:.2f} | {qmh / qmb:.2f} |")
EOF
