"""The checks of what a caller hands the engine: the prompts, the sampling parameters, the arguments' kinds."""
from __future__ import annotations

from .errors import EngineConfigError
from .sched.sampling import SamplingParams


def checked_prompt(index: int, ids, sampling: SamplingParams, *, vocab: int, max_model_len: int, block_size: int,
                   num_blocks: int, max_batched_tokens: int) -> list[int]:
    """``ids`` as a list, or :class:`EngineConfigError` saying why the prompt cannot run."""
    if not isinstance(ids, (list, tuple)):
        raise EngineConfigError(f"prompt {index} must be a list of token ids, got {kind(ids)}")
    ids = list(ids)
    if not ids:
        raise EngineConfigError(f"prompt {index} is empty")
    if not all(isinstance(t, int) and 0 <= t < vocab for t in ids):
        raise EngineConfigError(f"prompt {index} has token ids outside the vocabulary (0..{vocab - 1})")
    if len(ids) >= max_model_len:
        raise EngineConfigError(
            f"prompt {index} has {len(ids)} tokens, but the context (max_model_len) is {max_model_len} "
            f"tokens, leaving no room to generate; shorten the prompt or raise max_model_len"
        )
    whole = sampling.prompt_logprobs is not None or sampling.repetition_penalty != 1.0   # computed in one step
    if whole and len(ids) + 1 > max_batched_tokens:
        raise EngineConfigError(
            f"prompt {index} has {len(ids)} tokens; scoring a prompt (prompt_logprobs) or a repetition penalty "
            f"computes it in one step, of at most {max_batched_tokens} tokens (max_num_batched_tokens); shorten it "
            f"or raise the budget")
    if sampling.logit_bias and max(sampling.logit_bias) >= vocab:
        raise EngineConfigError(f"logit_bias names token {max(sampling.logit_bias)}, outside the vocabulary "
                                f"(0..{vocab - 1})")
    max_new = min(sampling.max_new_tokens, max_model_len - len(ids))
    needed = -(-(len(ids) + max_new) // block_size)
    if needed > num_blocks:
        raise EngineConfigError(
            f"prompt {index} needs {needed} KV blocks ({len(ids)} + {max_new} tokens), but the "
            f"cache has {num_blocks}; raise num_blocks or lower max_new_tokens"
        )
    return ids


def checked_sampling(sampling) -> SamplingParams:
    """``sampling`` (default: greedy) once :meth:`SamplingParams.validate` passed it."""
    sampling = SamplingParams() if sampling is None else sampling
    if not isinstance(sampling, SamplingParams):
        raise EngineConfigError(f"sampling must be a SamplingParams, got {kind(sampling)}")
    sampling.validate()
    return sampling


def kind(value) -> str:
    """How a wrong argument is named in an error: None, or its type."""
    return "None" if value is None else type(value).__name__
