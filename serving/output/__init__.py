"""What the server builds from a request's output besides its text: the OpenAI logprobs objects."""
from .logprobs import LogprobsWriter

__all__ = ["LogprobsWriter"]
