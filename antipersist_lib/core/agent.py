"""The ReAct-style agent loop shared by every method.

One model turn = one action = one step of the budget (50 by default; an episode that reaches
the budget without finishing is a failure). Replies are parsed by ``actions.parse_action``;
a reply without a usable command is an invalid step. ReAct ``think: ...`` pseudo-actions are
answered with ``OK.`` without touching the engine and also use a step, as in the original ReAct
setup. An exception from the engine ends the episode as an infrastructure failure (recorded,
never counted as the agent's failure); an unreachable LLM endpoint propagates, so the run stops
and can be resumed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from antipersist_lib.core import prompts
from antipersist_lib.core.actions import ParsedAction, parse_action
from antipersist_lib.envs.base import Environment
from antipersist_lib.errors import ContextLengthError, InfrastructureError
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory

log = logging.getLogger(__name__)

#: in-context demonstrations (``icl_examples``): at most this many per task, each given at least
#: ``MIN_ICL_CHARS_PER_EXAMPLE`` characters of the ``icl_max_chars`` budget after the block's
#: header. The default budget shows two ALFWorld expert episodes whole (1,700-3,400 characters,
#: under 1,000 tokens, for the pair: well inside a 4096-token context); longer ones lose middle steps.
MAX_ICL_EXAMPLES = 10
MIN_ICL_CHARS_PER_EXAMPLE = 600
MIN_ICL_MAX_CHARS = 1000
DEFAULT_ICL_MAX_CHARS = 6000


def icl_chars_needed(n: int) -> int:
    """The smallest ``icl_max_chars`` that gives each of ``n`` demonstrations its minimum share."""
    header = len(prompts.DEMONSTRATIONS_HEADER) + 1 + len(prompts.DEMONSTRATIONS_PREAMBLE)
    return max(MIN_ICL_MAX_CHARS, header + n * (MIN_ICL_CHARS_PER_EXAMPLE + 2))


NO_COMMAND_OBSERVATION = "No command found in your reply. Answer with one line 'Action: <command>'."
THINK_OBSERVATION = "OK."
#: what the loop-breaker counts as a repeat (``AgentConfig.repeat_rule``)
REPEAT_RULES = ("no_op", "revisit")


def _doc(default: Any, doc: str, shown: str | None = None) -> Any:
    """A field whose meaning (and, where words say it better, its default) lives beside it: ``agent_fields_table``
    renders them for docs/protocol.md, and a test keeps the two equal."""
    return field(default=default, metadata={"doc": doc, "default": shown})


@dataclass(frozen=True)
class AgentConfig:
    """The acting LLM's settings. Decoding (temperature, top_p) belongs to the backbone: a backbone
    profile sets it (``params/backbones/*.yaml``), a run's ``agent:`` block may override it, and
    the manifest records what was used. ``top_p=None`` sends no top_p (the server's default). The
    small-model aids (``show_valid_actions`` to ``resample_unlisted``) are all off in the paper's setting
    (docs/choices.md, "Small local models")."""

    max_steps: int = _doc(50, "steps per episode; set by the run's own `max_steps`, not in `agent:`")
    max_tokens: int = _doc(1024, "tokens per action (Table 3)")
    temperature: float = _doc(
        0.0, "sampling temperature of every action ([choices.md](choices.md))", "the backbone profile's, else 0"
    )
    top_p: float | None = _doc(
        None, "nucleus sampling; none: the server's default", "the backbone profile's, else none"
    )
    history_turns: int | None = _doc(None, "keep only the last N turns in the prompt", "all")
    icl_examples: int = _doc(
        0,
        "expert demonstrations of the task's type shown in the system prompt (replays of training tasks); "
        "ALFWorld, ScienceWorld and TextWorldExpress ([choices.md](choices.md))",
        "0 (none, as in the paper)",
    )
    icl_max_chars: int = _doc(DEFAULT_ICL_MAX_CHARS, "character budget of all demonstrations together")
    show_valid_actions: int = _doc(
        0,
        "list up to N of the engine's currently valid commands under the latest observation only (earlier turns "
        "keep their plain observation, so the prompt grows by one list, not one per step)",
        "0 (off)",
    )
    stop_at_observation: bool = _doc(
        False, "stop generating where the model starts writing the environment's next `Observation:` itself"
    )
    resample_repeats: int = _doc(
        0,
        "when the parsed command is a repeat (`repeat_rule`), ask again up to N times (0-5) at "
        "`repeat_temperature`, with a new seed each time",
        "0 (off)",
    )
    repeat_temperature: float = _doc(0.7, "the temperature of those re-asks")
    repeat_rule: str = _doc(
        "no_op",
        "what counts as a repeat: `no_op`, the previous command changed nothing (invalid, or the same observation "
        "twice); `revisit`, the command was already given in this episode from the very same observation (a "
        "deterministic engine would go round the same loop)",
    )
    repeat_feedback: bool = _doc(False, "a re-ask also shows the model its rejected reply and says why it was rejected")
    resample_unlisted: bool = _doc(
        False,
        "also re-ask a command that is not among the listed valid commands (`show_valid_actions` > 0 and the "
        "engine lists them); with `repeat_feedback` the model is told so",
    )

    def __post_init__(self) -> None:
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, (int, float))
            or not 0 <= self.temperature <= 2
        ):
            raise ValueError(f"temperature must be a number in [0, 2], got {self.temperature!r}")
        if self.top_p is not None and (
            isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1
        ):
            raise ValueError(f"top_p must be null or a number in (0, 1], got {self.top_p!r}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.history_turns is not None and self.history_turns < 1:
            raise ValueError(f"history_turns must be >= 1 or None, got {self.history_turns}")
        v = self.show_valid_actions
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"show_valid_actions must be an integer >= 0 (0 = off), got {v!r}")
        r = self.resample_repeats
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= 5:
            raise ValueError(f"resample_repeats must be an integer in [0, 5] (0 = off), got {r!r}")
        rt = self.repeat_temperature
        if isinstance(rt, bool) or not isinstance(rt, (int, float)) or not 0 < rt <= 2:
            raise ValueError(f"repeat_temperature must be a number in (0, 2], got {rt!r}")
        if self.repeat_rule not in REPEAT_RULES:
            raise ValueError(f"repeat_rule must be one of {REPEAT_RULES}, got {self.repeat_rule!r}")
        if not isinstance(self.resample_unlisted, bool):
            raise ValueError(f"resample_unlisted must be true or false, got {self.resample_unlisted!r}")
        if not isinstance(self.repeat_feedback, bool):
            raise ValueError(f"repeat_feedback must be true or false, got {self.repeat_feedback!r}")
        if not isinstance(self.stop_at_observation, bool):
            raise ValueError(f"stop_at_observation must be true or false, got {self.stop_at_observation!r}")
        n = self.icl_examples
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_ICL_EXAMPLES:
            raise ValueError(f"icl_examples must be an integer in [0, {MAX_ICL_EXAMPLES}] (0 = none), got {n!r}")
        c = self.icl_max_chars
        if isinstance(c, bool) or not isinstance(c, int) or c < MIN_ICL_MAX_CHARS:
            raise ValueError(f"icl_max_chars must be an integer >= {MIN_ICL_MAX_CHARS}, got {c!r}")
        if c < icl_chars_needed(n):
            raise ValueError(
                f"icl_max_chars = {c} leaves fewer than {MIN_ICL_CHARS_PER_EXAMPLE} characters for each of "
                f"icl_examples = {n} demonstrations (at least {icl_chars_needed(n)} needed); raise icl_max_chars "
                "or lower icl_examples"
            )


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def agent_fields_table() -> str:
    """The `agent:` block's fields as docs/protocol.md shows them (every field but ``max_steps``), from the
    fields' own metadata: the docs cannot drift from the code (tests/test_agent.py compares them)."""
    rows = ["| field | default | meaning |", "|---|---|---|"]
    for f in fields(AgentConfig):
        if f.name == "max_steps":
            continue
        default = f.metadata.get("default") or f"`{_shown(f.default)}`"
        rows.append(f"| `{f.name}` | {default} | {f.metadata['doc']} |")
    return "\n".join(rows)


@dataclass(frozen=True)
class EpisodeResult:
    trajectory: Trajectory
    outcome: EpisodeOutcome
    llm_calls: int  # execution calls made in this episode


#: what the model writes when it goes on to invent the environment's answer (stop_at_observation)
OBSERVATION_STOP = "\nObservation:"


def with_valid_actions(observation: str, valid: list[str] | None, limit: int) -> str:
    """The observation followed by up to ``limit`` of the engine's valid commands (unchanged when there are none)."""
    if not limit or not valid:
        return observation
    shown = [v for v in valid if v][:limit]
    more = f" (and {len(valid) - len(shown)} more)" if len(valid) > len(shown) else ""
    return prompts.VALID_ACTIONS.format(observation=observation, commands=", ".join(shown), more=more)


def _resample_seed(step: int, attempt: int) -> int:
    """A request seed of its own for each resample (step, attempt): reproducible, never the run's seed."""
    return 1_000_003 * (step + 1) + attempt


def revisits(action: str | None, steps: list[Step], initial_observation: str) -> bool:
    """True when ``action`` was already given in this episode from the same observation the agent sees now
    (the latest step's, or the initial one): on a deterministic engine it leads round the same loop. A
    no-op repeat is one case (the same observation twice); an A-B-A-B oscillation is another."""
    if not action:
        return False
    seen = [initial_observation] + [s.observation for s in steps]
    now = seen[-1]
    return any(step.action == action and seen[i] == now for i, step in enumerate(steps))


def repeats_a_no_op(action: str | None, steps: list[Step]) -> bool:
    """True when ``action`` is the previous step's command and that step changed nothing: the engine
    rejected it, or it returned the same observation as the step before it."""
    if not action or not steps or steps[-1].action != action:
        return False
    last = steps[-1]
    return not last.valid or (len(steps) > 1 and steps[-2].observation == last.observation)


def unlisted_command(command: str | None, shown: list[str] | None, config: AgentConfig) -> bool:
    """True when ``resample_unlisted`` is on, the prompt listed the valid commands (all of them: a cut list
    proves nothing) and ``command`` is not one of them."""
    if not config.resample_unlisted or not command or not shown:
        return False
    return command not in shown


def _window(messages: list[dict[str, str]], history_turns: int | None) -> list[dict[str, str]]:
    """System + first user message + the last ``history_turns`` (assistant, user) pairs."""
    if history_turns is None or len(messages) <= 2 + 2 * history_turns:
        return messages
    return messages[:2] + messages[-2 * history_turns :]


def run_episode(
    env: Environment,
    task: Task,
    llm: Any,
    *,
    context_blocks: Iterable[str] = (),
    config: AgentConfig = AgentConfig(),
    initial_observation: str | None = None,
    tags: dict[str, Any] | None = None,
) -> EpisodeResult:
    """Run one episode of ``task`` on ``env`` with the given context in the system prompt.

    Pass ``initial_observation`` when the caller has already reset the environment (Anti-
    Persistence needs the observation to embed the task before choosing a mode).
    """
    if initial_observation is None:
        try:
            initial_observation = env.reset(task)
        except Exception as exc:  # the engine could not even load the task
            log.warning("engine failed to load %s: %s", task.key, exc)
            return EpisodeResult(Trajectory(""), EpisodeOutcome(False, infra_failure=True, error=f"reset: {exc!r}"), 0)
    system = prompts.agent_system_prompt(env.action_help, context_blocks)
    messages: list[dict[str, str]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": prompts.AGENT_TASK.format(observation=initial_observation)},
    ]
    listed = config.show_valid_actions
    plain_last = messages[-1]["content"]  # the latest user turn without its command list
    if listed:
        messages[-1]["content"] = with_valid_actions(plain_last, env.valid_actions(), listed)
    stop = [OBSERVATION_STOP] if config.stop_at_observation else None
    steps: list[Step] = []
    calls = 0
    done = False
    error: str | None = None

    def shown_commands() -> list[str] | None:
        """Every valid command, when the latest prompt lists them all (None: it lists none, or a cut list)."""
        valid = [v for v in (env.valid_actions() or []) if v] if listed else []
        return valid if valid and len(valid) <= listed else None

    def ask(t: int, attempt: int = 0, rejected: tuple[str, str] | None = None) -> Any:
        """One execution call for step ``t``; a resample (``attempt`` > 0) uses its own temperature and seed, and
        with ``repeat_feedback`` also sees the ``rejected`` (reply, why) (never kept in the history)."""
        extra = {"temperature": config.repeat_temperature, "seed": _resample_seed(t, attempt)} if attempt else {}
        sent = _window(messages, config.history_turns)
        if attempt and config.repeat_feedback and rejected is not None:
            sent = [*sent, {"role": "assistant", "content": rejected[0]}, {"role": "user", "content": rejected[1]}]
        return llm.chat(
            sent,
            purpose="execution",
            temperature=extra.pop("temperature", config.temperature),
            top_p=config.top_p,
            max_tokens=config.max_tokens,
            stop=stop,
            tags={**(tags or {}), "step": t, **({"resample": attempt} if attempt else {})},
            **extra,
        )

    context_full: str | None = None  # the prompt outgrew the model's context: the episode ends there
    for t in range(config.max_steps):
        try:
            reply = ask(t)
            calls += 1
            parsed = parse_action(reply.text)
            for attempt in range(1, config.resample_repeats + 1):
                candidate = None if parsed.action is None or env.raw_actions else env.normalize_action(parsed.action)
                looping = (
                    revisits(candidate, steps, initial_observation)
                    if config.repeat_rule == "revisit"
                    else repeats_a_no_op(candidate, steps)
                )
                unlisted = (
                    not looping and config.resample_unlisted and unlisted_command(candidate, shown_commands(), config)
                )
                if not looping and not unlisted:
                    break
                why = (prompts.UNLISTED_FEEDBACK if unlisted else prompts.REPEAT_FEEDBACK).format(
                    command=candidate or ""
                )
                reply = ask(t, attempt, (reply.text, why))
                calls += 1
                parsed = parse_action(reply.text)
        except ContextLengthError as exc:
            context_full = f"context full at step {t}: {exc.last_error or exc}"
            log.warning("%s: %s", task.key, context_full)
            break
        if env.raw_actions:  # block actions (code): the adapter extracts what to run
            block = env.normalize_action(reply.text).strip()
            parsed = ParsedAction(block or None, "")
        reward = 0.0
        if parsed.action is None:
            observation, valid, action = NO_COMMAND_OBSERVATION, False, ""
        elif parsed.is_think:
            observation, valid, action = THINK_OBSERVATION, True, parsed.action
        else:
            action = parsed.action if env.raw_actions else env.normalize_action(parsed.action)
            try:
                res = env.step(action)
            except Exception as exc:
                kind = "engine" if isinstance(exc, InfrastructureError) else "unexpected engine"
                error = f"{kind} failure at step {t}: {exc!r}"
                log.warning("%s: %s", task.key, error)
                steps.append(Step(action, "", 0.0, True, False, reply.text))
                break
            observation, valid, reward, done = res.observation, res.valid, res.reward, res.done
        steps.append(Step(action, observation, reward, done, valid, reply.text))
        messages.append({"role": "assistant", "content": reply.text})
        if listed:  # only the latest turn lists the valid commands
            messages[-2]["content"] = plain_last
        plain_last = prompts.AGENT_OBSERVATION.format(observation=observation)
        shown = with_valid_actions(plain_last, env.valid_actions(), listed) if listed and not done else plain_last
        messages.append({"role": "user", "content": shown})
        if done:
            break
    trajectory = Trajectory(initial_observation, tuple(steps))
    if error is not None:
        outcome = EpisodeOutcome(False, 0.0, len(steps), trajectory.n_invalid, False, True, error)
    else:
        try:
            success, score = bool(env.success), float(env.score)
        except Exception as exc:
            outcome = EpisodeOutcome(False, 0.0, len(steps), trajectory.n_invalid, False, True, f"score: {exc!r}")
        else:
            outcome = EpisodeOutcome(
                success=success,
                score=score,
                n_steps=len(steps),
                n_invalid=trajectory.n_invalid,
                # a prompt that no longer fits ends the episode as the step budget does: the agent's (the
                # method's context, its history) budget ran out, not the engine; the score earned so far stands
                over_budget=not done and (len(steps) >= config.max_steps or context_full is not None),
                error=context_full,
            )
    return EpisodeResult(trajectory, outcome, calls)
