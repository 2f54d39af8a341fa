"""Regenerate the code env's shipped tasks (src/turnrl/envs/code/data/code_tasks.jsonl).

Deterministic given --seed and the corpus; takes a few minutes (one pytest run per candidate).

    python scripts/generate_code_tasks.py --seed 0
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from turnrl.envs.code.tasks import DATA_PATH, generate_tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tier1", type=int, default=8, help="tier-1 tasks per module (at most)")
    parser.add_argument("--tier2", type=int, default=4, help="tier-2 tasks per module (at most)")
    parser.add_argument("--tier3", type=int, default=3, help="tier-3 tasks per module (at most)")
    parser.add_argument("--visible-fraction", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DATA_PATH)
    args = parser.parse_args()

    start = time.time()
    tasks = generate_tasks(
        args.seed,
        {1: args.tier1, 2: args.tier2, 3: args.tier3},
        visible_fraction=args.visible_fraction,
        workers=args.workers,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(t.to_json() + "\n" for t in tasks))

    counts = Counter((t.split, t.payload["tier"]) for t in tasks)
    kinds = Counter(m["kind"] for t in tasks for m in t.payload["mutations"])
    test_modules = sorted({t.payload["module"] for t in tasks if t.split == "test"})
    print(f"{len(tasks)} tasks in {time.time() - start:.0f}s -> {args.out}")
    for split in ("train", "test"):
        print(f"  {split}: " + ", ".join(f"tier {k}: {counts[split, k]}" for k in (1, 2, 3)))
    print(f"  held-out modules: {', '.join(test_modules)}")
    print("  mutation kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))


if __name__ == "__main__":
    main()
