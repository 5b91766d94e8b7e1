#!/usr/bin/env bash
# Minimises fuzz/corpus/<target>/ to the smallest set of inputs that, on top of
# fuzz/seeds/<target>/, covers every edge the whole corpus covers (libFuzzer
# set-cover merge on edge coverage only: no hit counters, no comparison features), so
# the committed corpus stays small. Usage: fuzz/minimize.sh <target> (after a build).
set -euo pipefail
cd "$(dirname "$0")"
t=$1
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
bin=target/$triple/release/$t
test -x "$bin" || { echo "$bin: not built (cargo +nightly fuzz build $t)" >&2; exit 1; }
out=work/min-$t
rm -rf "$out" && mkdir -p "$out" corpus/"$t"
# Seeds go in first so only inputs that add coverage beyond them are taken, then leave.
cp seeds/"$t"/* "$out"/
ls seeds/"$t" > work/seeds-$t.list
"$bin" -set_cover_merge=1 -use_counters=0 -use_cmp=0 -use_value_profile=0 \
  -timeout=5 -rss_limit_mb="${FUZZ_RSS_MB:-2048}" "$out" corpus/"$t" 2>&1 | grep MERGE-OUTER | tail -1
(cd "$out" && xargs -d '\n' rm -f < ../seeds-$t.list)
rm -rf corpus/"$t" && mv "$out" corpus/"$t"
echo "corpus/$t: $(ls corpus/"$t" | wc -l) files, $(du -sb corpus/"$t" | cut -f1) bytes"
