"""What the server builds from a request's output besides its text: the OpenAI logprobs objects."""
from .logprobs import LogprobsWriter, logprobs_writer

__all__ = ["LogprobsWriter", "logprobs_writer"]
