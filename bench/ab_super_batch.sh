#!/bin/bash
# Same-call A/B of the sampler: bench_super_batch.py from an earlier commit's
# tree and from this checkout, in turn, ROUNDS times (interleaved, so that a
# slow or fast stretch of the machine falls on both), each process building
# its own graphs. Records go to $OUT/base.json and $OUT/new.json (with the
# commits given), logs to $OUT/base.log and $OUT/new.log; the per-batch lines
# (wall and torch.profiler kernel time) are printed as they come.
#
#   mkdir -p .base && git archive <rev> | tar -x -C .base   # the baseline tree (git-ignored)
#   BASE=.base BASE_COMMIT=<rev> NEW_COMMIT=<head> OUT=/tmp/ab bash bench/ab_super_batch.sh
#
# On the GPU machine pass .base in `carry`. CNR2000 is the path of
# cnr2000.npz (the shared data beside the checkout by default); EXTRA adds
# bench_super_batch.py arguments (default: K 1, 8, 16, foundation, [15, 10, 5],
# 160 batches, 3 repeats, a profile of the top 8 kernels).
set -u
ROOT=$(pwd)
: "${BASE:?BASE: the baseline tree}" "${OUT:?OUT: where records and logs go}"
CNR2000=${CNR2000:-$ROOT/../shared/data/cnr2000.npz}
ROUNDS=${ROUNDS:-2}
EXTRA=${EXTRA:---ks 1 8 16 --methods foundation --num-neighbors 15,10,5 --max-batches 160 --repeats 3 --profile 8}
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
unset PYTHONPATH  # each tree's bench imports its own package (it puts its tree first on sys.path)
mkdir -p "$OUT"
for i in $(seq "$ROUNDS"); do
  for t in base new; do
    if [ $t = base ]; then d=$ROOT/$BASE; c=${BASE_COMMIT:-base}; else d=$ROOT; c=${NEW_COMMIT:-new}; fi
    # shellcheck disable=SC2086
    (cd "$d" && python3 bench/bench_super_batch.py --graphs chung_lu cnr2000 --cnr2000 "$CNR2000" \
      --placements device $EXTRA --out "$OUT/$t.json" --commit "$c" > "$OUT/${t}_$i.log" 2>&1
     echo "$t ($c) round $i rc=$?")
    grep -E "ms/batch|K=8 /" "$OUT/${t}_$i.log" | cut -c1-150
    cat "$OUT/${t}_$i.log" >> "$OUT/$t.log" && rm "$OUT/${t}_$i.log"
  done
done
