"""The front end's cost per output token at the start and at the end of a long answer: the one output
path (anydev.core.output.OutputText: incremental decoding, stop strings, streamed pieces) beside the
whole-text re-decode per token it replaced. No engine: the tokens of a long text are fed as a stream.

    python benchmarks/output_text_bench.py --tokens 4096 [--model PATH] [--out FILE]

For each method: microseconds per token over the first and the last ``--window`` tokens, and their
ratio (end / start: 1.0 is a cost that does not grow with the answer).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

STOPS = ["<|never seen|>", "\n\n\n\n"]
TEXT = ("Once upon a time, a small model answered every question with numbers: 1, 2, 3. "
        "Les élèves étudient à l'école; 中文也可以 😀. def main():\n    return 0\n")


def answer_ids(tokenizer, count: int) -> list[int]:
    ids: list[int] = []
    piece = tokenizer.encode(TEXT, add_special_tokens=False)
    while len(ids) < count:
        ids += piece
    return ids[:count]


def incremental(tokenizer, ids: list[int]) -> list[float]:
    """Seconds per token of OutputText: add the token, take the settled text (what a stream sends)."""
    from anydev.core.output import OutputText

    text, costs = OutputText(tokenizer, STOPS), []
    for token in ids:
        start = time.perf_counter()
        text.add(token)
        text.take()
        costs.append(time.perf_counter() - start)
    return costs


def redecode(tokenizer, ids: list[int]) -> list[float]:
    """Seconds per token of the method replaced: decode the whole output, search it for the stops."""
    costs, sent = [], 0
    for n in range(1, len(ids) + 1):
        start = time.perf_counter()
        text = tokenizer.decode(ids[:n], skip_special_tokens=True).rstrip("\ufffd")
        any(s in text for s in STOPS)
        sent = max(sent, len(text))
        costs.append(time.perf_counter() - start)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--window", type=int, default=256, help="tokens averaged at the start and at the end")
    parser.add_argument("--model", default=None, help="an HF directory or .gguf whose tokenizer to use (default: the demo's)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    from anydev.core.loading.checkpoint import demo_checkpoint, open_checkpoint

    checkpoint = open_checkpoint(args.model) if args.model else demo_checkpoint()
    tokenizer = checkpoint.tokenizer
    ids = answer_ids(tokenizer, args.tokens)
    window = min(args.window, len(ids) // 2)
    rows = []
    for name, method in (("OutputText (incremental)", incremental), ("whole re-decode", redecode)):
        costs = method(tokenizer, ids)
        first = 1e6 * sum(costs[:window]) / window
        last = 1e6 * sum(costs[-window:]) / window
        rows.append({"method": name, "tokens": len(ids), "us_per_token_start": round(first, 2),
                     "us_per_token_end": round(last, 2), "end_over_start": round(last / first, 2)})
    report = {"tokenizer": checkpoint.source, "window": window, "rows": rows}
    for row in rows:
        print(f"{row['method']:>26}: {row['us_per_token_start']:8.2f} us/token at the start, "
              f"{row['us_per_token_end']:8.2f} at token {len(ids)}: x{row['end_over_start']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
