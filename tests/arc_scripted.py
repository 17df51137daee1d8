"""A scripted stand-in for the LLM of the ARC-AGI Stream probes (``arc.probes``): a test instrument, not a model.

It lives beside the tests rather than in ``antipersist_lib.testing``: importing ``arc`` from ``testing`` would
close an import cycle (``arc.figures`` imports ``analysis.plots``, and ``analysis`` reaches ``testing`` through
``runner``). Nothing in the library imports it.

It answers every prompt of the stream from the prompt's text alone, served by the loopback server:

- **solver**: collects the (input grid, code) pairs its memory shows (the history's trajectories and the pairs
  written into strategies) and replies with the code of the pair whose input is the task's first shown input
  (an exact repetition); otherwise with the newest pair's code (a surface copy); with no memory, the identity.
  It is an instance memorizer by construction, so it reproduces what seen tasks need and nothing more.
- **memory decision**: always Retain.
- **extraction**: one merge of every existing strategy and every selected trajectory, whose text lists every
  distinct (input, code) pair it was shown, compactly (``KEY <input fingerprint> CODE <base64 code>``, so that
  a small token cap does not cut it): lossless, and it combines whatever families the trajectories came from.

``run_scripted_probes`` runs a probe profile against it; the smoke data notebook 10 loads
(``tests/fixtures/arc/probes_scripted``) was produced by::

    python tests/arc_scripted.py --profile params/arc/probes_smoke.yaml --out tests/fixtures/arc/probes_scripted
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from antipersist_lib.arc.probes import ProbeResult, run_probes
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.serving.preflight import PREFLIGHT_PROMPT
from antipersist_lib.testing.loopback_server import LoopbackServer, last_user_text

SCRIPTED_MODEL = "scripted-arc-memorizer"
SCRIPTED_NOTE = (
    "SCRIPTED: produced by the kit's scripted test model (tests/arc_scripted.py), which copies "
    "the stored code of a task whose input it has seen and otherwise the newest stored code: these numbers "
    "check the pipeline and are not a model's result."
)
IDENTITY_CODE = "def solve(grid):\n    return [row[:] for row in grid]\n"

_GRID = r"\[\[.*?\]\]"
_EPISODE = re.compile(rf"Input:\n({_GRID})\n(?:Output:\n{_GRID}\n)?```python\n(.*?)```", re.DOTALL)
_STORED = re.compile(r"KEY ([0-9a-f]{12}) CODE ([A-Za-z0-9+/=]+)")
_FIRST_INPUT = re.compile(rf"Example 1\nInput:\n({_GRID})\n", re.DOTALL)


def fingerprint(grid_text: str) -> str:
    """A short stable key of a rendered grid."""
    return hashlib.sha256(grid_text.encode()).hexdigest()[:12]


def memory_pairs(text: str) -> list[tuple[str, str]]:
    """Every (input fingerprint, code) pair in ``text`` (rendered trajectories and stored keys), in order."""
    found = [(m.start(), fingerprint(m.group(1)), m.group(2)) for m in _EPISODE.finditer(text)]
    found += [(m.start(), m.group(1), base64.b64decode(m.group(2)).decode()) for m in _STORED.finditer(text)]
    return [(key, code) for _pos, key, code in sorted(found)]


def _between(text: str, start: str, end: str) -> str:
    head = text.split(start, 1)
    return head[1].split(end, 1)[0] if len(head) == 2 else ""


class ScriptedArcModel:
    """The loopback responder; counts the solver calls it answered (resume tests read ``solves``)."""

    def __init__(self) -> None:
        self.solves = 0
        self.extractions = 0

    def __call__(self, request: dict[str, Any]) -> str:
        text = last_user_text(request)
        if text == PREFLIGHT_PROMPT:
            return "OK"
        if text.startswith("# Task: write solve(grid)"):
            self.solves += 1
            return f"```python\n{self.solver_code(text)}```\n"
        if text.startswith("# Memory management decision"):
            return '{"action": "retain", "ids": []}'
        if text.startswith("# Strategy extraction"):
            self.extractions += 1
            return self.extraction(text)
        raise ValueError(f"the scripted ARC model has no answer for a prompt starting {text[:60]!r}")

    @staticmethod
    def solver_code(text: str) -> str:
        first = _FIRST_INPUT.search(_between(text, "## Examples", "## Strategy memory"))
        strategies = memory_pairs(_between(text, "## Strategy memory", "## Tool buffer"))
        history = memory_pairs(text.split("## History", 1)[1] if "## History" in text else "")
        pairs = strategies + history
        if first is not None:
            key = fingerprint(first.group(1))
            for stored, code in pairs:
                if stored == key:
                    return code
        if history:
            return history[-1][1]
        return strategies[-1][1] if strategies else IDENTITY_CODE

    @staticmethod
    def extraction(text: str) -> str:
        existing = _between(text, "## Current strategy memory", "## Selected trajectories")
        selected = _between(text, "## Selected trajectories", "## What to return")
        n_existing = len(re.findall(r"^### Strategy \d+", existing, re.MULTILINE))
        n_inputs = len(re.findall(r"^### Trajectory \d+", selected, re.MULTILINE))
        pairs = dict(memory_pairs(existing) + memory_pairs(selected))  # one per input, the newest code
        body = "\n".join(f"KEY {key} CODE {base64.b64encode(code.encode()).decode()}" for key, code in pairs.items())
        item = {
            "kind": "merge" if n_existing else "new",
            "from_existing": list(range(1, n_existing + 1)),
            "from_functions": list(range(1, n_inputs + 1)),
            "when_to_use": "puzzles whose input is one of those listed",
            "strategy": body,
        }
        return "```json\n" + json.dumps([item]) + "\n```\n"


def run_scripted_probes(
    profile: str | Path, out_dir: str | Path, *, model: ScriptedArcModel | None = None, log: Any = print
) -> ProbeResult:
    """Run a probe profile against the scripted model (no response cache; the manifest says it was scripted)."""
    responder = model or ScriptedArcModel()
    with LoopbackServer(responder=responder, model_id=SCRIPTED_MODEL) as server:
        endpoint = Endpoint(base_url=server.base_url, model=SCRIPTED_MODEL, max_retries=1, timeout_s=30.0)
        return run_probes(profile, out_dir, endpoint=endpoint, response_cache=False, provenance=SCRIPTED_NOTE, log=log)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python tests/arc_scripted.py",
        description="Run an ARC probe profile against the scripted test model (pipeline data, not a model result).",
    )
    parser.add_argument("--profile", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = run_scripted_probes(args.profile, args.out)
    print(result.frame.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
