"""What the server builds from a request's output besides its text: the OpenAI logprobs objects."""
from .choices import best_answers, merged_answer
from .logprobs import LogprobsWriter, joined

__all__ = ["LogprobsWriter", "best_answers", "joined", "merged_answer"]
