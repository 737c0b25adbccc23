"""One completions answer from the answers of several prompts sent in one request (a list of prompts)."""
from __future__ import annotations


def merged_answer(answers: list[dict]) -> dict:
    """The answer whose choice i is prompt i's (its ``index`` set to i), usage summed over the prompts."""
    first = answers[0]
    choices = [{**answer["choices"][0], "index": i} for i, answer in enumerate(answers)]
    usage = {key: sum(answer["usage"][key] for answer in answers) for key in first["usage"]}
    return {**first, "choices": choices, "usage": usage}
