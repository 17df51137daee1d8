"""antipersist: reproduction kit for "More Memory, Worse Agents: Error Reproduction and
Anti-Persistence in LLM Agents" (2026).

The library holds all logic; notebooks and the command line only configure and call it.
"""

from antipersist_lib.records import MODES, SYNTHESIS_MODES, EpisodeOutcome, Step, Task, Trajectory

__version__ = "0.1.0"

__all__ = ["MODES", "SYNTHESIS_MODES", "EpisodeOutcome", "Step", "Task", "Trajectory", "__version__"]
