"""The race behind the super-batch crash of 2026-12-02 (bench/results/README.md,
"Twelfth session"), on its own: ``torch.topk`` on a side stream over a score
vector that another stream is still ``index_add_``-ing into, as
``DynamicCache._refresh`` / ``_choose`` did before the fix (papers100M scale
at 24 GB: ~80M cold scores, a capacity of 4,687,500 rows). Counts the rounds
whose topk output has out-of-range or repeated indices. GPU only.

    python bench/dynamic_topk_race.py            # live scores (before the fix): bad rounds expected
    python bench/dynamic_topk_race.py snapshot   # topk of a clone (the fix): 0 expected
"""
import sys
import torch

snapshot = len(sys.argv) > 1 and sys.argv[1] == "snapshot"
dev = torch.device("cuda")
N, K, B, ROUNDS = 80_000_000, 4_687_500, 3_000_000, 30
g = torch.Generator(device=dev).manual_seed(0)
score = (torch.randint(0, 40, (N,), device=dev, generator=g).float() / 40 / 0.01)  # many ties
side, main = torch.cuda.Stream(), torch.cuda.current_stream()
bad_rounds = 0
for r in range(ROUNDS):
    # the loader's stream: a few batches' score updates queued (observe's index_add_)
    for _ in range(4):
        idx = torch.randint(0, N, (B,), device=dev, generator=g)
        score.index_add_(0, idx, torch.full((B,), 1.5, device=dev))
    # the refresh: side stream, no wait for the updates in flight
    with torch.cuda.stream(side):
        src = score.clone() if snapshot else score
        # fill the output's future block with a sentinel so unwritten slots show
        torch.full((K,), -(1 << 40), dtype=torch.int64, device=dev)
        value, node = torch.topk(src, K, sorted=True)
    side.synchronize()
    out_of_range = int(((node < 0) | (node >= N)).sum())
    repeats = K - int(torch.unique(node).numel())
    if out_of_range or repeats:
        bad_rounds += 1
        print(f"round {r}: {out_of_range} out of range, {repeats} repeated", flush=True)
    main.synchronize()
print(f"{'snapshot' if snapshot else 'live'}: {bad_rounds} of {ROUNDS} rounds bad")
