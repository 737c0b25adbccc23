"""A request's output turned into text as its tokens arrive: the one output path of the engine and the server."""
from .detokenizer import IncrementalDetokenizer
from .stops import StopFinder
from .text import OutputText

__all__ = ["IncrementalDetokenizer", "OutputText", "StopFinder"]
