"""What the server builds from a request's output besides its text: the OpenAI logprobs objects."""
from .choices import best_answers, merged_answer
from .echo import Echo, prompt_text
from .logprobs import LogprobsWriter, joined, logprobs_writer

__all__ = ["Echo", "LogprobsWriter", "best_answers", "joined", "logprobs_writer", "merged_answer", "prompt_text"]
