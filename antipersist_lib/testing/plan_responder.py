"""A scripted responder that plays real benchmark engines from known expert plans. NOT a model.

For end-to-end tests on ScienceWorld and ALFWorld: the test computes each task's expert plan
(ScienceWorld's gold path, ALFWorld's walkthrough) and its initial observation; the responder
finds the plan whose initial observation appears in the agent's first message and replays it
step by step — for tasks marked to fail it only looks around, so runs contain both successes and
failures. Every non-agent request (synthesis, reflection, insight extraction, query rewriting,
skill evolution, judging) gets one fixed reply written so that every method's parser finds what
it needs in it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from antipersist_lib.core import prompts

AGENT_MARKER = prompts.AGENT_SYSTEM.splitlines()[0]

UNIVERSAL_REPLY = """\
ACCEPT - the guidance matches the evidence.
ADD: Check every receptacle once before revisiting any of them.
strategy: find the target object first, then act on it
pitfall: repeating an action that had no effect
actions: go to, take, move, open, look
Do NOT repeat a failed command because nothing changes. Instead: try another receptacle.
[{"name": "search-systematically", "kind": "general", "task_type": null, "content": "Visit receptacles in order and take the object when seen. Why it works: successful episodes searched systematically while failed ones repeated the same commands."}]"""


class PlanResponder:
    """``PlanResponder({initial_observation: [actions]}, fail={initial_observation, ...})``."""

    def __init__(
        self, plans: dict[str, list[str]], fail: set[str] | frozenset[str] = frozenset(), idle_action: str = "look"
    ) -> None:
        self.plans = plans
        self.fail = set(fail)
        self.idle_action = idle_action
        self.agent_calls = 0
        self.other_calls = 0
        #: how often each markdown header ("## ...") appeared in an agent's system prompt
        self.headers_seen: Counter[str] = Counter()

    def __call__(self, request: dict[str, Any]) -> str:
        msgs = [m for m in request.get("messages", []) if isinstance(m, dict)]
        system = msgs[0].get("content", "") if msgs and msgs[0].get("role") == "system" else ""
        if AGENT_MARKER not in system:
            self.other_calls += 1
            return UNIVERSAL_REPLY
        self.agent_calls += 1
        self.headers_seen.update(line.strip() for line in system.splitlines() if line.startswith("## "))
        first_user = next((m.get("content", "") for m in msgs if m.get("role") == "user"), "")
        key = next((k for k in self.plans if k and k in first_user), None)
        if key is None or key in self.fail:
            return f"Thought: look around.\nAction: {self.idle_action}"
        step = sum(1 for m in msgs if m.get("role") == "assistant")
        plan = self.plans[key]
        action = plan[step] if step < len(plan) else self.idle_action
        return f"Thought: follow the plan.\nAction: {action}"
