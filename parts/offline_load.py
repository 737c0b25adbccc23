"""Issue 33's diagnosis: does the offline run's prefill slow down when other cores are busy, as a
server's front ends and clients keep them? One engine (the 1B, 256 prompts of 512 tokens, 128 tokens
each, 512-token steps as serve_bench), runs alternating idle / with N busy-loop processes pinned to
other cores; prints each run's prefill steps and seconds and mean decode step (the engine's clock)."""
import random
import subprocess
import sys
import time

from anydev.core import InferEngine, SamplingParams
from anydev.core.engine_config import EngineConfig
from anydev.core.loading.checkpoint import open_checkpoint

model, busy_cpus, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
device, streams, prompt_len = (sys.argv[4:] + ["nvidia", "256", "512"][len(sys.argv[4:]):])[:3]
streams, prompt_len = int(streams), int(prompt_len)
config = EngineConfig(device=device, max_num_seqs=streams, max_model_len=1024, max_num_batched_tokens=512)
rng = random.Random(0)
with InferEngine(open_checkpoint(model), config) as engine:
    vocab = engine.checkpoint.config.vocab_size
    prompts = lambda: [[rng.randrange(vocab) for _ in range(prompt_len)] for _ in range(streams)]
    sampling = SamplingParams(max_new_tokens=128, ignore_eos=True)
    engine.generate_ids(prompts(), sampling)           # warm-up: every bucket compiled and captured
    for run in range(runs):
        for busy in (False, True):
            loops = [subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
                     for cpu in (range(*map(int, busy_cpus.split("-"))) if busy else ())]
            time.sleep(0.5 if busy else 0)
            start = time.perf_counter()
            engine.generate_ids(prompts(), sampling)
            wall = time.perf_counter() - start
            for p in loops:
                p.kill()
                p.wait()
            s = engine.last_stats
            print(f"run {run} {'busy' if busy else 'idle'} ({len(loops)} loops): wall {wall:.2f} s, prefill "
                  f"{s.prefill_steps} steps {s.prefill_seconds:.3f} s ({s.prefill_seconds / s.prefill_steps * 1e3:.2f} "
                  f"ms a step), decode {s.decode_steps} steps {s.decode_seconds / max(s.decode_steps, 1) * 1e3:.2f} ms a step",
                  flush=True)
