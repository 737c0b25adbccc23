"""A tiny Llama trained on a fixed text, for accuracy records where no real model can be fetched (no
hub; no package on the index ships one): its weights have structure, so quantizing them costs
perplexity the way it does in a real model, and every number is reproducible from this file alone.

    OMP_NUM_THREADS=1 python benchmarks/tiny_llama.py /tmp/tiny-llama   # ~1 min on a busy 2-core machine
    python benchmarks/perplexity.py --model /tmp/tiny-llama --gguf /tmp/tiny-llama/q8_0.gguf,/tmp/tiny-llama/q4_k.gguf

Writes into OUT: the model as an HF directory in bfloat16 (transformers' ``LlamaForCausalLM``: 2
layers, hidden 256, MLP 512, 4 heads of 64, 2 KV heads, the demo tokenizer's 384 tokens), and the same
weights as a GGUF file per block format (``q8_0.gguf``, ``q4_0.gguf``, ``q4_1.gguf``, ``q4_k.gguf``,
``q6_k.gguf``; llama.cpp's layout: q/k rows permuted; the norms float32). The text is :func:`corpus`:
English-like sentences from a small seeded grammar, and number facts (counting, sums) whose next words
are certain, written here because no public-domain text ships with the project or its packages;
:func:`corpus` with another seed is the held-out text.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import random
import time
from pathlib import Path

import numpy as np
import torch

from anydev.core.loading.demo_model import BOS, EOS, DEMO_CHAT_TEMPLATE, build_demo_tokenizer
from anydev.core.loading.gguf_loader import gguf_name
from anydev.core.loading.random_weights import gguf_writer, llama_config, write_gguf

#: The model's shape: K-quant blocks (256 values) fit every projection's rows.
SHAPE = dict(vocab_size=384, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)
GGUF_FORMATS = ("Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K")    # every GGUF block format the kernels take
TRAIN_SEED, HELD_OUT_SEED = 0, 1
ROPE_THETA = 500000.0        # llama_config's, which save_gguf writes

_NUMBERS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
            "sixteen seventeen eighteen nineteen twenty").split()
_NOUNS = "cat dog bird horse farmer child teacher river tree house king queen ship village road storm".split()
_ADJECTIVES = "old young small big quiet bright dark tired happy cold green".split()
_VERBS = "sees finds follows helps watches calls carries remembers leaves builds".split()
_PLACES = "in the morning|at night|near the river|on the road|by the house|in the village|under the tree".split("|")
_ADVERBS = "slowly quickly again often never always".split()


def _phrase(rng: random.Random) -> str:
    adjective = f"{rng.choice(_ADJECTIVES)} " if rng.random() < 0.5 else ""
    return f"the {adjective}{rng.choice(_NOUNS)}"


def _sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:                                           # a sum: its answer is certain
        a, b = rng.randrange(11), rng.randrange(10)
        return f"{_NUMBERS[a]} and {_NUMBERS[b]} is {_NUMBERS[a + b]}."
    if kind < 0.35:                                           # counting: every next word is certain
        start = rng.randrange(15)
        return " ".join(_NUMBERS[start:start + rng.randrange(3, 7)]) + "."
    words = f"{_phrase(rng)} {rng.choice(_VERBS)} {_phrase(rng)}"
    if rng.random() < 0.4:
        words += f" {rng.choice(_PLACES)}"
    if rng.random() < 0.3:
        words += f" {rng.choice(_ADVERBS)}"
    if rng.random() < 0.2:
        words += f", and {_phrase(rng)} is {rng.choice(_ADJECTIVES)}"
    return words[0].upper() + words[1:] + "."


def corpus(seed: int, sentences: int) -> str:
    """``sentences`` sentences of the grammar, a paragraph of 4-8 at a time; the same for the same seed."""
    rng, lines = random.Random(seed), []
    while sentences > 0:
        n = min(sentences, rng.randrange(4, 9))
        lines.append(" ".join(_sentence(rng) for _ in range(n)))
        sentences -= n
    return "\n".join(lines) + "\n"


def token_ids(text: str) -> list[int]:
    """The text in the demo tokenizer's ids (no BOS)."""
    return build_demo_tokenizer().encode(text, add_special_tokens=False).ids


def train(out: Path, steps: int, seq_len: int = 64, batch: int = 8, seed: int = 0) -> tuple[list[float], float]:
    """Train the model on ``corpus(TRAIN_SEED)`` and save it in bfloat16 into ``out``; returns the
    training losses (every 50 steps) and the seconds it took."""
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**SHAPE, max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=ROPE_THETA,
                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)
    model = LlamaForCausalLM(config)
    data = torch.tensor(token_ids(corpus(TRAIN_SEED, 40_000)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    generator, losses, start = torch.Generator().manual_seed(seed), [], time.perf_counter()
    model.train()
    for step in range(steps):
        starts = torch.randint(0, len(data) - seq_len, (batch,), generator=generator)
        windows = torch.stack([data[s:s + seq_len] for s in starts.tolist()])
        loss = model(input_ids=windows, labels=windows).loss      # transformers shifts the labels by one
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == steps - 1:
            losses.append(round(loss.item(), 4))
            print(f"step {step:>5}: loss {losses[-1]:.4f}", flush=True)
    seconds = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    state = {name: t.detach().to(torch.bfloat16).contiguous() for name, t in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    hf_config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **SHAPE, "head_dim": 64,
                 "rms_norm_eps": 1e-5, "rope_theta": ROPE_THETA, "max_position_embeddings": 512,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1}
    (out / "config.json").write_text(json.dumps(hf_config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    build_demo_tokenizer().save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS, "chat_template": DEMO_CHAT_TEMPLATE}))
    return losses, seconds


def _kquants():
    """tests/support/kquants.py: the Q4_K and Q6_K encoders (the gguf package decodes K-quants only)."""
    spec = importlib.util.spec_from_file_location("kquants", Path(__file__).resolve().parents[1] / "tests" / "support" / "kquants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _llama_cpp_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (its converter's ``permute``): per head, two halves -> interleaved pairs."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def save_gguf(model_dir: Path, path: Path, tensor_type: str) -> None:
    """The HF checkpoint in ``model_dir`` as a GGUF file: 2-D weights in ``tensor_type``, norms float32."""
    import gguf
    from safetensors.torch import load_file

    config = llama_config(max_position_embeddings=512, **SHAPE)    # its rope_theta is ROPE_THETA
    writer = gguf_writer(path, config)
    heads = {"q_proj": SHAPE["num_attention_heads"], "k_proj": SHAPE["num_key_value_heads"]}
    for name, tensor in load_file(str(model_dir / "model.safetensors")).items():
        values = tensor.float().numpy()
        part = name.rsplit(".", 2)[-2]
        if part in heads:
            values = _llama_cpp_rows(values, heads[part])
        if values.ndim == 1:
            writer.add_tensor(gguf_name(name), values)
            continue
        kind = gguf.GGMLQuantizationType[tensor_type]
        if tensor_type in ("Q4_K", "Q6_K"):     # the gguf package decodes K-quants only
            blocks = getattr(_kquants(), f"quantize_{tensor_type.lower()}")(values)
        else:
            blocks = gguf.quants.quantize(values, kind)
        writer.add_tensor(gguf_name(name), blocks.reshape(values.shape[0], -1), raw_dtype=kind)
    write_gguf(writer)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=8, help="sequences a step")
    p.add_argument("--seq-len", type=int, default=64, help="tokens a sequence")
    args = p.parse_args(argv)
    losses, seconds = train(args.out, args.steps, args.seq_len, args.batch)
    for tensor_type in GGUF_FORMATS:
        save_gguf(args.out, args.out / f"{tensor_type.lower()}.gguf", tensor_type)
    (args.out / "training.json").write_text(json.dumps({"steps": args.steps, "batch": args.batch, "seq_len": args.seq_len,
                                                        "seconds": seconds, "losses": losses}))
    print(f"wrote {args.out}: trained {args.steps} steps in {seconds:.0f} s (loss {losses[0]} -> {losses[-1]}); "
          f"GGUF {', '.join(GGUF_FORMATS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
