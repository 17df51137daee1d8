"""ReAct (Yao et al. 2023): the agent loop with no memory at all."""

from __future__ import annotations

from antipersist_lib.methods.base import Method


class ReAct(Method):
    name = "react"
    uses_embeddings = False
