"""``anydev bench latency|throughput|serve`` (cli/bench/): the figures vLLM's bench prints are printed,
and the JSON of --output-json holds them, consistent with what was asked (token counts, request
counts); on cpu with the embedded demo model, a few requests each."""
from __future__ import annotations

import json

from anydev.cli.commands import main
from serve_support import MODEL, Server


def run_bench(argv, tmp_path, capsys):
    out = tmp_path / "figures.json"
    code = main(["bench", *argv, "--output-json", str(out)])
    return code, capsys.readouterr().out, json.loads(out.read_text())


def test_latency_prints_the_average_and_percentiles_of_every_timed_run(tmp_path, capsys):
    code, printed, figures = run_bench(["latency", "--device", "cpu", "--batch-size", "3", "--input-len", "5",
                                        "--output-len", "4", "--num-iters-warmup", "1", "--num-iters", "4"],
                                       tmp_path, capsys)
    assert code == 0
    assert "Avg latency:" in printed
    for q in ("10", "25", "50", "75", "90", "99"):
        assert f"{q}% percentile latency:" in printed
    assert len(figures["latencies"]) == 4
    assert figures["output_tokens_per_iter"] == [3 * 4] * 4
    values = [figures["percentiles"][q] for q in ("10", "25", "50", "75", "90", "99")]
    assert values == sorted(values)
    assert min(figures["latencies"]) <= figures["avg_latency"] <= max(figures["latencies"])


def test_throughput_counts_exactly_the_tokens_asked_for(tmp_path, capsys):
    code, printed, figures = run_bench(["throughput", "--device", "cpu", "--num-prompts", "5", "--input-len", "6",
                                        "--output-len", "3"], tmp_path, capsys)
    assert code == 0
    assert "requests/s" in printed and "total tokens/s" in printed and "output tokens/s" in printed
    assert figures["num_requests"] == 5
    assert figures["num_prompt_tokens"] == 5 * 6 and figures["num_output_tokens"] == 5 * 3
    assert figures["total_num_tokens"] == 5 * 6 + 5 * 3
    assert abs(figures["tokens_per_second"] * figures["elapsed_time"] - figures["total_num_tokens"]) < 1e-6


def test_serve_prints_throughput_and_ttft_tpot_itl_and_fails_when_requests_fail(tmp_path, capsys):
    srv = Server("--max-model-len", "64")
    try:
        code, printed, figures = run_bench(["serve", "--port", str(srv.port), "--num-prompts", "4",
                                            "--input-len", "7", "--output-len", "5", "--request-rate", "50"],
                                           tmp_path, capsys)
        too_long, _, refused = run_bench(["serve", "--port", str(srv.port), "--num-prompts", "2",
                                          "--input-len", "60", "--output-len", "10"], tmp_path, capsys)
    finally:
        srv.stop()
    assert code == 0
    for line in ("Successful requests:", "Request throughput (req/s):", "Output token throughput (tok/s):"):
        assert line in printed
    for name in ("TTFT", "TPOT", "ITL"):
        for stat in ("Mean", "Median", "P99"):
            assert f"{stat} {name} (ms):" in printed
            assert figures[f"{stat.lower()}_{name.lower()}_ms"] >= 0
    assert figures["model"] == MODEL                  # taken from the server's /v1/models
    assert figures["completed"] == 4 and figures["failed"] == 0
    assert figures["total_input_tokens"] == 4 * 7 and figures["total_output_tokens"] == 4 * 5
    assert figures["median_ttft_ms"] <= figures["p99_ttft_ms"]
    assert too_long == 1 and refused["completed"] == 0 and refused["failed"] == 2   # 60 + 10 > 64
