"""The ARC-AGI Stream study's largest prompts, rendered from its profile before any model call.

Why: the solver, decision and extraction prompts carry the episodic buffer, so they grow with it. An uncapped
buffer at |B| = 8 fresh tasks per step passes a 262k-token context after about 55 steps, hours into a 400-step
stream; a condition that dies there loses every call before it. The study therefore renders, when its profile
loads, the largest prompt each condition can send (the kit's own templates, the buffer filled to the most
episodes it can hold at its last checkpoint with the largest rendered episodes of the stream's tasks) and
refuses a profile whose prompt does not fit, naming the sizes and the fix. ``antipersist_lib.serving.context_budget``
measures, as everywhere in the kit, and its ``PromptGuard`` checks every request of the run as well.

What the estimate leaves out: the abstract store is empty here (App. D.1 sets no cap on its entry count, so no
bound exists before the run; the guard catches a store that outgrows the context). A Running episode holds the
model's own code, unknown before the run: it is counted at ``RUNNING_CODE_FACTOR`` times the task's ground-truth
code, under a failure banner of three grids (the reply cap, 4,096 tokens at the paper's setting, would bound it
but refuses every realistic profile; the guard checks the real ones).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from antipersist_lib.arc.controller import StreamConfig, allowed_actions, gt_code, task_examples
from antipersist_lib.arc.generator import FRESH_POOL, ArcTask, make_task, pool_plan
from antipersist_lib.arc.prompts import decision_messages, extraction_messages, solver_messages
from antipersist_lib.arc.stores import Episode
from antipersist_lib.serving.context_budget import CHARS_PER_TOKEN, messages_text, request_tokens
from antipersist_lib.studies import fail

#: how many stream tasks are rendered to find the largest episodes (the generator draws every task the same
#: way, so a few dozen already hold the large scenes; the run's guard checks the rest)
SAMPLE_TASKS = 48
#: a Running episode's code, as a multiple of the ground-truth code of its task (module docstring)
RUNNING_CODE_FACTOR = 2


@dataclass(frozen=True)
class PromptSize:
    """One measured prompt: which condition and call, how many episodes it holds, its size."""

    condition: str
    prompt: str  # "solver" (a stream step), "evaluation" (a checkpoint's held-out solve), "decision", "extraction"
    episodes: int
    chars: int
    tokens: int  # prompt text and reply cap, at CHARS_PER_TOKEN characters per token

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def most_episodes(config: StreamConfig, steps: int) -> tuple[int, int]:
    """The most episodes a condition's buffer carries into a step after ``steps`` steps, and the most a decision
    prompt sees (the carried ones and the step's new trajectories). Force keeps none between rounds."""
    per = config.tasks_per_step
    if config.regime == "force":
        return 0, per
    carried = steps * per if config.buffer_size is None else min(config.buffer_size, steps * per)
    return carried, carried + per


def _episode(task: ArcTask, config: StreamConfig, number: int) -> Episode:
    shown = task_examples(task)[: config.history_examples]
    if config.source == "gt":
        code, banner = gt_code(task), ""
    else:  # the solver's own code (estimated) under a failure banner of three grids
        code = "x" * (RUNNING_CODE_FACTOR * len(gt_code(task)))
        example = task_examples(task)[0]
        banner = "\n".join(f"# {g}" for g in (example["input"], example["output"], example["output"]))
    return Episode(f"E{number}", task.task_id, task.family, task.skill, shown, code, config.source == "gt", banner)


def largest_episodes(tasks: Sequence[ArcTask], config: StreamConfig, n: int) -> list[Episode]:
    """``n`` episodes, the largest renderings of the sample first (repeated when the sample holds fewer)."""
    if n <= 0:
        return []
    sample = sorted(
        (_episode(t, config, i) for i, t in enumerate(tasks[:SAMPLE_TASKS], start=1)),
        key=lambda e: -len(e.code) - len(str(e.examples)),
    )
    return [
        Episode(f"E{i}", e.task_id, e.family, e.skill, e.examples, e.code, e.passed, e.banner)
        for i, e in enumerate(itertools.islice(itertools.cycle(sample), n), start=1)
    ]


def _largest_task(tasks: Sequence[ArcTask]) -> ArcTask:
    return max(tasks[:SAMPLE_TASKS], key=lambda t: len(str(task_examples(t))))


def condition_prompts(
    name: str,
    config: StreamConfig,
    last_checkpoint: int,
    stream_tasks: Sequence[ArcTask],
    eval_tasks: Sequence[ArcTask],
    solver_sources: Sequence[str] = ("episodic", "abstract"),
) -> list[PromptSize]:
    """The largest solver, evaluation, decision and extraction prompts of one condition, as rendered by the kit's
    templates, with the buffer as full as the condition allows at its last step and at its last checkpoint."""
    steps = int(config.steps or 1)
    carried, deciding = most_episodes(config, steps)
    at_checkpoint, _ = most_episodes(config, last_checkpoint)
    episodes = largest_episodes(stream_tasks, config, deciding)
    largest_stream = _largest_task(stream_tasks)
    sizes = []

    def measure(prompt: str, messages: list[dict[str, str]], held: int, reply: int) -> None:
        text = messages_text(messages)
        sizes.append(PromptSize(name, prompt, held, len(text), request_tokens(messages, reply)))

    history = episodes[:carried] if "episodic" in config.solver_memory else []
    measure(
        "solver",
        solver_messages(task_examples(largest_stream), [], history, tool_bodies=config.tool_bodies),
        len(history),
        config.solver_max_tokens,
    )
    if eval_tasks:
        held = episodes[:at_checkpoint] if "episodic" in solver_sources else []
        measure(
            "evaluation",
            solver_messages(task_examples(_largest_task(eval_tasks)), [], held, tool_bodies=config.tool_bodies),
            len(held),
            config.solver_max_tokens,
        )
    if config.regime != "force":  # Force consolidates without asking
        strategies = [] if config.regime == "auto" else None
        measure(
            "decision",
            decision_messages(
                steps, episodes, strategies, allowed=allowed_actions(config.regime), capacity=config.buffer_size
            ),
            len(episodes),
            config.manager_max_tokens,
        )
    if config.regime != "episodic_only":
        measure(
            "extraction",
            extraction_messages([], episodes, schema=config.extraction_schema),
            len(episodes),
            config.manager_max_tokens,
        )
    return sizes


def refusal(sizes: Sequence[PromptSize], context_length: int, model: str) -> str | None:
    """The message naming every prompt that does not fit ``context_length`` and the fixes; None when all fit."""
    over = [s for s in sizes if s.tokens > context_length]
    if not over:
        return None
    worst = max(over, key=lambda s: s.tokens)
    listed = "; ".join(
        f"{s.condition} {s.prompt} prompt with {s.episodes} buffered episode(s): {s.chars} characters, about "
        f"{s.tokens} tokens"
        for s in sorted(over, key=lambda s: -s.tokens)[:6]
    )
    return (
        f"{len(over)} prompt(s) of this study would not fit the context length of {model!r}, {context_length} tokens "
        f"(at {CHARS_PER_TOKEN} characters per token, reply cap included; the largest needs about {worst.tokens}): "
        f"{listed}. Fix: cap the episodic buffer (episodic_capacity; Table 4's buffer holds 50 episodes at "
        "|B| = 8), run fewer steps or checkpoints, show fewer examples (task_examples, stream.history_examples), "
        "lower stream.solver_max_tokens / manager_max_tokens, or use a backbone with a longer context"
    )


# -- a study profile's check (``arc.study_profile.load_study_profile`` and ``run_profile``) ------------------------------


#: what a prompt that outgrew the context during a run can do (the abstract store has no cap, App. D.1)
CONTEXT_FIX = (
    "cap the episodic buffer (episodic_capacity), run fewer steps, lower stream.solver_max_tokens, or use a backbone "
    "with a longer context; re-running resumes, complete conditions are kept"
)


def named_context_length(profile: Any) -> tuple[int | None, str]:
    """The context length the profile's backbone states, and its model name: the embedded default's ``n_ctx``, a
    backbone profile's ``context_length`` (None when it states none)."""
    from antipersist_lib.serving import profiles

    try:
        return profiles.named_context_length(profile.backbone, profile.backbone_options)
    except ValueError as exc:
        raise fail(profile.path, f"'backbone': {exc}") from None


def profile_prompt_sizes(profile: Any) -> list[PromptSize]:
    """Every condition's largest prompts (``arc.context``), rendered from a sample of the stream's and the
    evaluated tasks."""
    sample = replace(profile.train_pool, limit=min(profile.train_pool.limit or SAMPLE_TASKS, SAMPLE_TASKS))
    stream_tasks = _sample_tasks(sample, profile.n_train, profile.n_test)
    held = replace(profile.heldout_pool, limit=min(profile.heldout_pool.limit or SAMPLE_TASKS, SAMPLE_TASKS))
    eval_tasks = _sample_tasks(held, profile.n_train, profile.n_test)
    sizes = []
    for cond in profile.conditions + profile.fig2_conditions:
        config = profile.stream_config(cond)
        last = max(profile.checkpoints_of(cond))
        sizes += condition_prompts(cond.name, config, last, stream_tasks, eval_tasks, profile.eval_sources)
    return sizes


@functools.lru_cache(maxsize=8)
def _sample_tasks(spec: Any, n_train: int, n_test: int) -> tuple[ArcTask, ...]:
    """A pool's first tasks (cached: loading a profile twice renders the same sample)."""
    if spec.name == FRESH_POOL:
        plan = pool_plan(FRESH_POOL, spec.seed, size=max(int(spec.limit or 1), SAMPLE_TASKS))[: spec.limit]
    else:
        plan = pool_plan(spec.name, spec.seed)[: spec.limit]
    return tuple(make_task(e.family, e.skill, e.seed, n_train=n_train, n_test=n_test) for e in plan)


def check_profile_context(
    profile: Any, context_length: int | None = None, model: str | None = None
) -> list[PromptSize]:
    """The profile's largest prompts, refused (``StudyProfileError`` naming sizes and fixes) when one exceeds the
    context length: the one given (the endpoint a run really uses), else the one its backbone names. A backbone
    stating no context length is not checked."""
    if context_length is None:
        context_length, named = named_context_length(profile)
        model = model or named
    sizes = profile_prompt_sizes(profile)
    if context_length is not None:
        message = refusal(sizes, int(context_length), model or profile.backbone)
        if message is not None:
            raise fail(profile.path, message)
    return sizes
