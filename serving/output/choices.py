"""One answer from several: of the prompts of one completions request (a list of prompts), or of
the samples of one request (``n``, ``best_of``)."""
from __future__ import annotations


def merged_answer(answers: list[dict]) -> dict:
    """The answer with every prompt's choices, prompt after prompt (``index`` counting through them, as
    OpenAI numbers ``n`` choices of several prompts), usage summed over the prompts."""
    first = answers[0]
    choices = [{**choice, "index": i} for i, choice in enumerate(c for answer in answers for c in answer["choices"])]
    usage = {key: sum(answer["usage"][key] for answer in answers) for key in first["usage"]}
    return {**first, "choices": choices, "usage": usage}


def best_answers(answers: list[dict], logprobs: list[list], n: int, keep_logprobs: bool) -> dict:
    """The answer of one prompt's samples: the ``n`` of them with the highest summed logprob (all of
    them, in order, when there are ``n``), as choices 0..n-1; the prompt counted once in the usage.
    ``keep_logprobs``: the client asked for logprobs (best_of's ranking alone does not show them)."""
    order = list(range(len(answers)))
    if len(answers) > n:
        order = sorted(order, key=lambda i: -sum(lp.logprob for lp in logprobs[i]))[:n]
    choices = []
    for index, i in enumerate(order):
        choice = {**answers[i]["choices"][0], "index": index}
        if not keep_logprobs:
            choice["logprobs"] = None
        choices.append(choice)
    completion = sum(answers[i]["usage"]["completion_tokens"] for i in range(len(answers)))
    prompt = answers[0]["usage"]["prompt_tokens"]
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {**answers[0], "choices": choices, "usage": usage}
