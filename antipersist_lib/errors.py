"""The errors that cross layers, in one leaf module (it imports nothing from the kit); an error that only one
module raises and only its callers read (a profile's, a grid file's, a notebook check's) lives beside it.

Callers catch these by layer: a benchmark that is missing (install it) versus one that failed
mid-episode (recorded as an infrastructure failure), an endpoint that is down versus one that
rejects the request, state that held-out evaluation froze, a run directory held or configured
differently, a model reply that cannot be read. The command line turns each into one line naming the fix.
"""

from __future__ import annotations


class FrozenStateError(RuntimeError):
    """Something tried to write a store that held-out evaluation froze, or one opened read-only."""


class ReplyParseError(ValueError):
    """A model reply holds no answer in the format its prompt asked for (no JSON value of the wanted type, no
    labelled section, ...); the message says what is missing. Callers apply their documented fallback."""


class InfrastructureError(RuntimeError):
    """The benchmark engine failed (exception, crashed JVM, lost server); not the agent's fault."""


class BenchmarkUnavailableError(RuntimeError):
    """A benchmark's engine, data or server is missing; the message says how to get it."""


class EmbeddedServerError(BenchmarkUnavailableError):
    """The embedded llama.cpp server died or failed its self-check; the message gives its signal, log tail and fix."""


class LLMError(RuntimeError):
    """Base of the kit's endpoint errors; carries how many retries were spent."""

    def __init__(self, message: str, *, retries: int = 0, last_error: str | None = None) -> None:
        super().__init__(message)
        self.retries = retries
        self.last_error = last_error


class LLMUnavailableError(LLMError):
    """The endpoint kept failing transiently until the retry budget was spent."""


class LLMRequestError(LLMError):
    """The endpoint rejected the request (a 4xx other than 408/409/429); retrying cannot help."""


class ContextLengthError(LLMRequestError):
    """The endpoint refused the prompt as longer than the model's context (a 400 that says so)."""


class ContextOverflowError(ValueError):
    """A prompt would not fit the backbone's context; raised by the kit before the request is sent (a profile
    check at load time, or the guard around every call), with the sizes and the fix in its message."""

    def __init__(self, message: str, *, needed_tokens: int, context_length: int, reply_tokens: int = 0) -> None:
        super().__init__(message)
        self.needed_tokens = needed_tokens  # prompt text and reply cap together
        self.context_length = context_length
        self.reply_tokens = reply_tokens


class ReasoningBudgetError(LLMRequestError):
    """A reply with no answer: its tokens went to reasoning, or it was cut at the token limit. Retrying the
    same request gives the same; the message names the fix (budget, reasoning effort, thinking off)."""


class RunLockedError(RuntimeError):
    """Another process holds this run directory."""


class ManifestMismatchError(ValueError):
    """The run directory belongs to a different configuration."""


class NotebookError(RuntimeError):
    """A notebook could not be executed: unknown notebook or parameter, or a failing cell."""
