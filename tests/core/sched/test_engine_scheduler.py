"""The continuous scheduler on the cpu backend: prefix caching, chunked prefill, preemption, aborts,
per-request sampling, concurrent callers and close while generating."""
from __future__ import annotations

import threading

import pytest

from anydev.core import EngineClosedError, EngineConfig, InferEngine, SamplingParams
from anydev.core.sched import block_manager as bm
from anydev.core.sched.block_manager import BlockManager
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.sched.scheduler import Scheduler
from anydev.core.sched.sequence import Sequence, Status

BLOCK = 4
GREEDY = SamplingParams(max_new_tokens=12)
PROMPTS = [[2 + i, 40 + 3 * i, 7, 9, 11] * (i + 2) for i in range(5)]


def config(**changes):
    changes.setdefault("block_size", BLOCK)
    changes.setdefault("max_model_len", 96)
    return EngineConfig(use_graphs=False, **changes)


def generate(engine_config, prompts=PROMPTS, sampling=GREEDY):
    with InferEngine(demo_checkpoint(), engine_config) as engine:
        tokens = [o.token_ids for o in engine.generate_ids(prompts, sampling)]
        return tokens, engine


@pytest.fixture(scope="module")
def alone():
    """Each prompt generated on its own, chunking and caching off: the reference tokens."""
    with InferEngine(demo_checkpoint(), config(enable_prefix_caching=False, enable_chunked_prefill=False)) as engine:
        return [engine.generate_ids([p], GREEDY)[0].token_ids for p in PROMPTS]


# ---- the block manager on its own --------------------------------------------------------------

def seq_of(tokens):
    return Sequence(0, list(tokens), 4)


def admit_and_compute(manager, tokens):
    seq = seq_of(tokens)
    count = manager.admit(seq, budget=1000)
    assert count == len(tokens) - seq.num_cached
    seq.num_cached += count
    manager.commit(seq)
    return seq


def test_a_cached_prefix_is_shared_by_reference_and_only_full_blocks_hit():
    manager = BlockManager(num_blocks=8, block_size=BLOCK)
    first = admit_and_compute(manager, range(10))          # blocks [0..3] [4..7] + 2 tokens
    assert manager.num_cached_blocks == 2
    second = admit_and_compute(manager, [*range(8), 50, 51, 52])
    assert second.blocks[:2] == first.blocks[:2] and second.num_prefix_hit == 8
    assert second.blocks[2] not in first.blocks
    assert manager.num_used == 3 + 1                         # the two shared blocks count once
    manager.free(first)
    manager.free(second)
    assert manager.num_used == 0 and manager.num_cached_blocks == 2


def test_the_whole_prompt_is_never_a_hit_so_its_last_token_is_computed():
    manager = BlockManager(num_blocks=8, block_size=BLOCK)
    manager.free(admit_and_compute(manager, range(8)))
    again = seq_of(range(8))
    assert manager.admit(again, budget=100) == 4 and again.num_cached == 4


def test_free_cached_blocks_are_evicted_least_recently_used_first_tails_before_prefixes():
    manager = BlockManager(num_blocks=6, block_size=BLOCK)
    old = admit_and_compute(manager, range(100, 109))        # 2 full blocks cached + 1 partial
    manager.free(old)
    new = admit_and_compute(manager, range(200, 209))        # takes the 3 blocks never used
    manager.free(new)
    assert manager.num_cached_blocks == 4 and manager.num_free == 6
    # 3 fresh blocks: the two partial (unhashed) ones go first, then the least recently used cached
    # block, which is the older prompt's tail block, not its first.
    third = seq_of(range(300, 309))
    assert manager.admit(third, budget=100) == 9
    assert manager.num_cached_blocks == 3
    assert len(manager.match_prefix(list(range(200, 209)))) == 2
    assert len(manager.match_prefix(list(range(100, 109)))) == 1


def test_a_hash_collision_is_caught_by_the_token_check(monkeypatch):
    monkeypatch.setattr(bm, "chain_hash", lambda parent, tokens: 7)   # every block collides
    manager = BlockManager(num_blocks=8, block_size=BLOCK)
    admit_and_compute(manager, range(9))
    assert manager.match_prefix([9, 9, 9, 9, 9, 9]) == []


def test_prefix_caching_off_never_hits():
    manager = BlockManager(num_blocks=8, block_size=BLOCK, enable_prefix_caching=False)
    manager.free(admit_and_compute(manager, range(9)))
    assert manager.match_prefix(list(range(9))) == [] and manager.hit_rate == 0


# ---- the scheduler on its own -------------------------------------------------------------------

def running_seq(manager, index, prompt_len, computed, output=()):
    """A running sequence with ``computed`` of its tokens in the cache (distinct tokens: no hits)."""
    seq = Sequence(index, [100 * index + t for t in range(prompt_len)], 8, output=list(output))
    assert manager.admit(seq, budget=computed) == computed
    seq.num_cached = computed
    manager.commit(seq)
    seq.status = Status.RUNNING
    return seq


def test_a_prompt_chunk_leaves_room_for_the_decodes_after_it():
    manager = BlockManager(num_blocks=64, block_size=BLOCK, enable_prefix_caching=False)
    scheduler = Scheduler(manager, max_num_seqs=8, max_num_batched_tokens=10)
    # a decode, a prompt half prefilled (32 tokens to go), two decodes: more work than the budget
    scheduler.running = [running_seq(manager, 0, 5, 5, output=[7]), running_seq(manager, 1, 40, 8),
                         running_seq(manager, 2, 5, 5, output=[7]), running_seq(manager, 3, 5, 5, output=[7])]
    step = scheduler.schedule()
    # (the decodes first, each group in arrival order: the model runs their attention as decodes)
    assert [(seq.index, n) for seq, n in zip(step.seqs, step.num_new)] == [(0, 1), (2, 1), (3, 1), (1, 7)]


def test_a_chunk_with_no_room_beside_the_decodes_waits_and_the_decodes_run():
    manager = BlockManager(num_blocks=64, block_size=BLOCK, enable_prefix_caching=False)
    scheduler = Scheduler(manager, max_num_seqs=8, max_num_batched_tokens=2)
    scheduler.running = [running_seq(manager, 1, 40, 8), running_seq(manager, 2, 5, 5, output=[7]),
                         running_seq(manager, 3, 5, 5, output=[7])]
    step = scheduler.schedule()
    assert [(seq.index, n) for seq, n in zip(step.seqs, step.num_new)] == [(2, 1), (3, 1)]


# ---- the engine ----------------------------------------------------------------------------------

def test_chunked_prefill_gives_the_unchunked_tokens_and_mixes_chunks_with_decodes(alone):
    with InferEngine(demo_checkpoint(), config(max_num_batched_tokens=6)) as engine:
        worker, forward, steps = engine.workers[0], engine.workers[0].forward, []

        def recording(batch, params, *rest):
            steps.append([p is not None for p in params])
            return forward(batch, params, *rest)

        worker.forward = recording
        tokens = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
    assert tokens == alone
    assert max(len(rows) for rows in steps) > 1
    # a step where a prompt chunk (no token wanted) ran beside rows that got their token
    assert any(not all(rows) and any(rows) for rows in steps)


def test_unchunked_scheduling_gives_the_same_tokens(alone):
    assert generate(config(enable_chunked_prefill=False, enable_prefix_caching=False))[0] == alone


def test_a_repeated_prompt_hits_the_prefix_cache_with_identical_tokens(alone):
    shared = PROMPTS[4]
    with InferEngine(demo_checkpoint(), config()) as engine:
        first = engine.generate_ids([shared], GREEDY)[0].token_ids
        assert engine.block_manager.hit_tokens == 0
        second = engine.generate_ids([shared], GREEDY)[0].token_ids
        hit = engine.block_manager.hit_tokens
    assert first == second == alone[4]
    assert hit == (len(shared) - 1) // BLOCK * BLOCK


def test_a_tiny_kv_cache_forces_preemption_and_the_tokens_stay_the_same(alone):
    # 10 blocks of 4: every prompt alone fits, but not all of them growing together.
    with InferEngine(demo_checkpoint(), config(num_blocks=12)) as engine:
        tokens = [o.token_ids for o in engine.generate_ids(PROMPTS, GREEDY)]
        assert engine.scheduler.num_preemptions > 0
        assert engine.block_manager.num_used == 0
    assert tokens == alone


def test_preemption_keeps_a_seeded_requests_tokens():
    """A preempted sequence's generator stays on the sampler: its draws go on where they stopped."""
    hot = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95, seed=5)
    roomy, engine = generate(config(), sampling=hot)
    assert engine.scheduler.num_preemptions == 0
    cramped, engine = generate(config(num_blocks=12), sampling=hot)
    assert engine.scheduler.num_preemptions > 0
    assert cramped == roomy
    assert roomy != generate(config(), sampling=SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95, seed=6))[0]


def test_an_aborted_request_gives_its_blocks_back_at_once():
    with InferEngine(demo_checkpoint(), config()) as engine:
        seq = engine.add_request(PROMPTS[3], SamplingParams(max_new_tokens=50))
        engine.step()
        engine.step()
        engine.step()   # (steps overlap: the third step's call reads the second one's token back)
        assert engine.block_manager.num_used > 0 and len(seq.output) == 2
        engine.abort(seq)
        assert engine.block_manager.num_used == 0
        assert seq.finish_reason == "abort" and not engine.has_unfinished
        assert engine.step() == []


def test_a_seeded_request_samples_the_same_tokens_whatever_shares_its_steps():
    hot = SamplingParams(max_new_tokens=16, temperature=1.2, top_k=50, seed=11)
    with InferEngine(demo_checkpoint(), config()) as engine:
        on_its_own = engine.generate_ids([PROMPTS[1]], hot)[0].token_ids
        mine = engine.add_request(PROMPTS[1], hot)
        others = [engine.add_request(p, SamplingParams(max_new_tokens=20, temperature=0.8, seed=i))
                  for i, p in enumerate(PROMPTS)]
        while engine.has_unfinished:
            engine.step()
    assert mine.output == on_its_own
    assert all(o.output for o in others)


def test_stop_strings_and_stop_tokens_end_a_request():
    with InferEngine(demo_checkpoint(), config()) as engine:
        free = engine.generate(["hello world"], SamplingParams(max_new_tokens=24))[0]
        stop_token = free.token_ids[6]
        by_token = engine.generate(["hello world"], SamplingParams(max_new_tokens=24, stop_token_ids=[stop_token]))[0]
        assert by_token.token_ids == free.token_ids[:free.token_ids.index(stop_token) + 1]
        assert by_token.finish_reason == "stop"
        stop = free.text[5:8]
        by_string = engine.generate(["hello world"], SamplingParams(max_new_tokens=24, stop=[stop]))[0]
        assert by_string.finish_reason == "stop"
        assert by_string.text == free.text[:free.text.index(stop)]


def test_concurrent_generate_callers_short_of_kv_blocks_wait_their_turn(alone):
    results, errors = {}, []

    def call(i):
        try:
            results[i] = engine.generate_ids([PROMPTS[i]], GREEDY)[0].token_ids
        except Exception as exc:   # reported by the assertion below
            errors.append(exc)

    with InferEngine(demo_checkpoint(), config(num_blocks=12)) as engine:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert engine.block_manager.num_used == 0
    assert errors == []
    assert [results[i] for i in range(len(PROMPTS))] == alone


def test_close_while_another_thread_generates_at_tp2_stops_it_with_engine_closed():
    engine = InferEngine(demo_checkpoint(), config(tp=2))
    outcome, started = [], threading.Event()
    forward = engine.workers[0].forward

    def signalling(*args):
        started.set()
        return forward(*args)

    engine.workers[0].forward = signalling

    def generate_long():
        try:
            engine.generate_ids([PROMPTS[0]] * 4, SamplingParams(max_new_tokens=80))
            outcome.append("finished")
        except Exception as exc:   # the assertion below says what it must be
            outcome.append(exc)

    thread = threading.Thread(target=generate_long)
    thread.start()
    assert started.wait(timeout=60)
    engine.close()
    thread.join(timeout=60)      # a hang guard, not a timing check: close must not wait on a collective
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], EngineClosedError), outcome
    assert "closed" in str(outcome[0])
