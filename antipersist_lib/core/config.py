"""Every Anti-Persistence setting in one config: the paper's Table 3 plus the kit's choices.

It sits below the methods because more than the method reads it: the trajectory-memory baseline
shares B and the task-type filter, the ``select`` command and the decision audit rebuild the
selector from it, and the ablation maps take their default points from ``TABLE3``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from antipersist_lib.core.selector import SelectorConfig
from antipersist_lib.core.synthesis import FormatLimits
from antipersist_lib.memory.trajectory_store import TASK_FILTERS
from antipersist_lib.records import MODES
from antipersist_lib.serving.embeddings import OBSERVATION_PREFIX_CHARS

POLICIES = ("bandit", "fixed", "random")

#: config fields that are groups of their own (flattened into the method parameters)
_GROUPS = ("selector", "limits")


@dataclass(frozen=True)
class AntiPersistenceConfig:
    """Every Anti-Persistence setting, in one place.

    The defaults are the paper's Table 3 (B = 5, B-hat = 10, c = 0.5, gamma = 0.998, rho = 0.7,
    W_init = 3, three round-robin iterations, epsilon = 0.1, lambda = 0.05, 1024 synthesis tokens)
    plus the kit's documented choices where the paper is silent (observation and record clipping
    in the synthesis input, the task-type filter, the contrast count), and the ablation switches
    (off by default). ``TABLE3`` below is this object with its defaults; the method, the
    ``select`` command and the ablation maps all read their defaults from it. ``params()`` /
    ``from_params()`` convert to and from the flat method-parameter names a run's
    ``method_params`` use.
    """

    budget: int = 5  # B: records per retrieval
    contrast: int = 1  # contrasting successes shown with the failures in corrective mode
    lam: float = 0.05  # cost weight lambda in r = clip(y - lambda * kappa, -1, 1)
    #: initial observation prefix in the embedding text (B.3's truncate(obs, 500)); the number lives beside
    #: ``embed_text`` (serving sits below core), every method reads it from here
    embed_prefix_chars: int = OBSERVATION_PREFIX_CHARS
    synthesis_max_tokens: int = 1024
    synthesis_temperature: float = 0.0  # B.2: the synthesis LLM decodes greedily
    #: retries of the task's embedding request: None = the embedding endpoint's ``max_retries`` (profile,
    #: default 6); 0 = the paper's B.3 (a failed call means mode ``none``, no in-iteration retry)
    embedding_retries: int | None = None
    task_filter: str = "task_type"  # retrieval candidates: same task type ("task_type"), same "benchmark", or "off"
    selector: SelectorConfig = field(default_factory=SelectorConfig)
    limits: FormatLimits = field(default_factory=FormatLimits)
    policy: str = "bandit"  # ablations (Figure 6): "fixed" (with fixed_mode) or "random"
    fixed_mode: str | None = None
    persist: bool = False  # Table 2: keep the guidance as abstractions instead of discarding it
    frozen_skills: str | None = None  # F.2: a skill library (JSON file or run directory) in every context
    seed_pool: str | None = None  # a trajectory pool (JSONL) M_0 starts from (faulty-memories study; core.seeding)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError(f"budget (B) must be >= 1, got {self.budget}")
        if self.contrast < 0:
            raise ValueError(f"contrast must be >= 0, got {self.contrast}")
        if self.lam < 0:
            raise ValueError(f"lam (lambda) must be >= 0, got {self.lam}")
        if self.embedding_retries is not None and (
            not isinstance(self.embedding_retries, int)
            or isinstance(self.embedding_retries, bool)
            or self.embedding_retries < 0
        ):
            raise ValueError(f"embedding_retries must be null or an integer >= 0, got {self.embedding_retries!r}")
        if self.synthesis_max_tokens < 1:
            raise ValueError(f"synthesis_max_tokens must be >= 1, got {self.synthesis_max_tokens}")
        if self.task_filter not in TASK_FILTERS:
            raise ValueError(f"task_filter is {self.task_filter!r}, expected one of {TASK_FILTERS}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy is {self.policy!r}, expected one of {POLICIES}")
        if self.policy == "fixed" and self.fixed_mode not in MODES:
            raise ValueError(f"policy 'fixed' needs fixed_mode in {MODES}, got {self.fixed_mode!r}")
        if self.policy != "fixed" and self.fixed_mode is not None:
            raise ValueError("fixed_mode is only used with policy 'fixed'")
        if self.seed_pool is not None and not isinstance(self.seed_pool, str):
            raise ValueError(f"seed_pool must be a path string, got {self.seed_pool!r}")

    def params(self) -> dict[str, Any]:
        """The flat method parameters (selector and clipping fields lifted to the top level)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _GROUPS}
        out.update(self.selector.to_dict())
        out.update({f.name: getattr(self.limits, f.name) for f in fields(FormatLimits)})
        return out

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> AntiPersistenceConfig:
        """Build from flat method parameters; names outside ``params()`` are an error naming them."""
        defaults = cls().params()
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise ValueError(f"unknown Anti-Persistence parameter(s) {unknown}; valid: {sorted(defaults)}")
        p = {**defaults, **params}
        top = {f.name: p[f.name] for f in fields(cls) if f.name not in _GROUPS}
        return cls(
            **top,
            selector=SelectorConfig(**{f.name: p[f.name] for f in fields(SelectorConfig)}),
            limits=FormatLimits(**{f.name: p[f.name] for f in fields(FormatLimits)}),
        )


#: the paper's Table 3 defaults (with the kit's documented choices): the one source every default is read from
TABLE3 = AntiPersistenceConfig()

#: parameters added after runs were recorded, each with the value those runs behaved as. A recorded
#: configuration (a manifest's ``method_config``) without the name is rebuilt with this value, so an
#: old run resumes, audits and replays as it ran, not with the new default.
LEGACY_PARAMS: dict[str, Any] = {"heldout_selection": "as_training"}


def recorded_config(recorded: dict[str, Any]) -> AntiPersistenceConfig:
    """The configuration a run recorded (its manifest's ``method_config``, or ``method_params`` for
    runs older than that field): names this version does not know are left out, ``LEGACY_PARAMS``
    fill the names the record lacks, Table 3 the rest."""
    known = TABLE3.params()
    params = {k: v for k, v in recorded.items() if k in known}
    for name, value in LEGACY_PARAMS.items():
        params.setdefault(name, value)
    return AntiPersistenceConfig.from_params(params)
