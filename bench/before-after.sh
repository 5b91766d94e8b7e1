#!/usr/bin/env bash
# The decision path of this tree against an earlier commit, side by side in one run:
# builds `dispatch_overhead` (release) at BASE in a cache outside the repo and here, runs
# the two binaries in alternating rounds, and prints for each scenario the median of
#   - the in-process engine cost (`Event::parse` + `decide` + serialize, mean µs), and
#   - the sequential HTTP mean as a ratio to the bare axum baseline of the same binary,
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
    """{scenario: (in-process mean µs, sequential mean × base)}"""
    seq, inproc, section = {}, {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            section = line
        if not line.startswith("| ") or "---" in line or line.startswith("| scenario"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if section and section.startswith("### Sequential"):
            seq[cells[0]] = float(cells[9].rstrip("×"))
        elif section and section.startswith("### In process"):
            inproc[cells[0]] = float(cells[4])
    return {s: (inproc[s], seq[s]) for s in inproc if s in seq}

runs = {w: [parse((out / f"{w}-{i}.md").read_text()) for i in range(1, rounds + 1)] for w in ("base", "head")}
print(f"# decision path: HEAD vs {rev}, {rounds} alternating rounds, medians\n")
print("| scenario | engine µs BASE | engine µs HEAD | HEAD ÷ BASE | seq mean × axum BASE | seq mean × axum HEAD | HEAD ÷ BASE |")
print("|---|---:|---:|---:|---:|---:|---:|")
for s in runs["base"][0]:
    med = lambda w, k: statistics.median(r[s][k] for r in runs[w])
    eb, eh, qb, qh = med("base", 0), med("head", 0), med("base", 1), med("head", 1)
    print(f"| {s} | {eb:.2f} | {eh:.2f} | {eh / eb:.2f} | {qb:.2f} | {qh:.2f} | {qh / qb:.2f} |")
EOF
