"""What a long job will cost, before it starts, and what it did cost, after (``--plan``).

Why: the paper grid is hundreds of runs and a faulty-memories paper profile hundreds of thousands of calls;
a user should learn the calls, tokens, hours and dollars before the first request, and see the ledger's
actual numbers beside that plan afterwards. Every number says where it came from, in this order:

* calls per episode: the ledgers of existing runs of the same benchmark, method and backbone; else the
  paper's Table 6 (calls per held-out task) for that method, backbone and benchmark; else Table 6's mean over
  its four methods for that backbone and benchmark; else Table 6's mean over the paper's backbones for the
  benchmark; else existing runs of the same benchmark and method on another model; else one call per step of the episode budget (an upper bound for ReAct-like agents);
* tokens per call: existing runs of the same benchmark and method and backbone, then of the same benchmark
  and method, then of the same benchmark; else ``ASSUMED_TOKENS`` (the kit's stated guess);
* cost: the backbone profile's ``price_per_mtok``; time: the tokens over the throughput the user gives.

Planning reads profiles and run folders only: it starts no process and sends no request.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.analysis.paper import table6
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.rundir import RunDirectory

#: (prompt, completion) tokens per call when no run of the benchmark has been recorded: the kit's guess
#: (a ReAct prompt with its task, history and command list; a short thought and action)
ASSUMED_TOKENS = (3000, 80)
#: purposes that are not chat calls
NOT_CHAT = frozenset({"embedding"})
#: the methods Table 6 reports
TABLE6_METHODS = frozenset(c.method for c in table6())
#: the paper's backbones as Table 6 names them, by profile name
PAPER_BACKBONE = {
    "llama-4-scout": "llama-4-scout",
    "qwen3-coder-next": "qwen3-coder-next",
    "gemma-4-31b-it": "gemma-4-31b-it",
}


@dataclass(frozen=True)
class Estimate:
    """A number and where it came from."""

    value: float
    source: str


@dataclass(frozen=True)
class RecordedRun:
    """What one existing run directory says about its costs (from its manifest, episodes and ledger)."""

    path: Path
    benchmark: str
    method: str
    backbone: str
    episodes: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int = 0

    @classmethod
    def read(cls, path: Path) -> RecordedRun | None:
        layout = RunDirectory(path)
        try:
            man = json.loads(layout.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(man, dict) or "benchmark" not in man or "method" not in man:
            return None
        episodes = sum(_countrecords(path / name) for name in ("episodes_train.jsonl", "episodes_heldout.jsonl"))
        calls = prompt = completion = reasoning = 0
        for line in records(path / "calls.jsonl"):
            if line.get("purpose") in NOT_CHAT or not line.get("ok", True):
                continue
            calls += 1
            prompt += int(line.get("prompt_tokens", 0) or 0)
            completion += int(line.get("completion_tokens", 0) or 0)
            reasoning += int(line.get("reasoning_tokens", 0) or 0)
        return cls(path, str(man["benchmark"]), str(man["method"]), str(man.get("backbone", "")), episodes, calls,
                   prompt, completion, reasoning)  # fmt: skip


def records(path: Path) -> Iterable[dict[str, Any]]:
    """The JSON objects of a JSONL file (``jsonl.read_jsonl``; a missing file: none)."""
    return (line.value for line in read_jsonl(path) if isinstance(line.value, dict))


def _countrecords(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for raw in fh if raw.strip())
    except OSError:
        return 0


def recorded_runs(roots: Iterable[Path]) -> list[RecordedRun]:
    """Every run directory (a folder holding ``manifest.json`` and ``calls.jsonl``) under ``roots``."""
    out, seen = [], set()
    for root in roots:
        if not root.is_dir():
            continue
        for manifest in root.rglob("manifest.json"):
            folder = manifest.parent.resolve()
            if folder in seen or not (folder / "calls.jsonl").exists():
                continue
            seen.add(folder)
            run = RecordedRun.read(folder)
            if run is not None and run.episodes and run.calls:
                out.append(run)
    return out


@dataclass
class Rates:
    """Calls per episode and tokens per call, measured where runs exist, else from the paper or assumed."""

    runs: list[RecordedRun] = field(default_factory=list)

    def _pooled(self, keep: Any) -> tuple[int, int, int, int, int] | None:
        chosen = [r for r in self.runs if keep(r)]
        if not chosen:
            return None
        return (
            len(chosen),
            sum(r.episodes for r in chosen),
            sum(r.calls for r in chosen),
            sum(r.prompt_tokens for r in chosen),
            sum(r.completion_tokens for r in chosen),
        )

    def calls_per_episode(self, benchmark: str, method: str, backbone: str, max_steps: int) -> Estimate:
        same = self._pooled(lambda r: (r.benchmark, r.method, r.backbone) == (benchmark, method, backbone))
        if same:
            return Estimate(same[2] / same[1], f"measured: {same[0]} run(s) of {method} on {benchmark}, {backbone}")
        paper_bb = PAPER_BACKBONE.get(backbone)
        cells = [c for c in table6() if c.benchmark == benchmark and c.backbone == paper_bb]
        exact = [c for c in cells if c.method == method]
        if exact:
            return Estimate(exact[0].mean, f"Table 6 ({method}, {paper_bb}, {benchmark})")
        if cells:
            mean = statistics.fmean(c.mean for c in cells)
            return Estimate(
                mean, f"Table 6 mean of its {len(cells)} methods ({paper_bb}, {benchmark}): {method} not in it"
            )
        on_bench = [
            c for c in table6() if c.benchmark == benchmark and (c.method == method or method not in TABLE6_METHODS)
        ]
        if on_bench:
            mean = statistics.fmean(c.mean for c in on_bench)
            return Estimate(mean, f"Table 6 mean over the paper's backbones ({benchmark}): no record of {backbone}")
        other = self._pooled(lambda r: (r.benchmark, r.method) == (benchmark, method))
        if other:
            models = sorted({r.backbone for r in self.runs if (r.benchmark, r.method) == (benchmark, method)})
            return Estimate(other[2] / other[1], f"measured on another model ({', '.join(models)}): {other[0]} run(s)")
        return Estimate(float(max_steps), f"assumed: one call per step of the {max_steps}-step budget (no record)")

    def tokens_per_call(self, benchmark: str, method: str, backbone: str) -> tuple[Estimate, Estimate]:
        for keep, what in (
            (lambda r: (r.benchmark, r.method, r.backbone) == (benchmark, method, backbone), f"{method}, {backbone}"),
            (lambda r: (r.benchmark, r.method) == (benchmark, method), f"{method}, any model"),
            (lambda r: r.benchmark == benchmark, "any method and model"),
        ):
            pooled = self._pooled(keep)
            if pooled:
                n, _, calls, prompt, completion = pooled
                source = f"measured: {n} run(s) on {benchmark} ({what})"
                return Estimate(prompt / calls, source), Estimate(completion / calls, source)
        source = f"assumed: {ASSUMED_TOKENS[0]} prompt / {ASSUMED_TOKENS[1]} completion tokens a call (no record)"
        return Estimate(float(ASSUMED_TOKENS[0]), source), Estimate(float(ASSUMED_TOKENS[1]), source)


@dataclass(frozen=True)
class PlannedRun:
    """One run of a job: its episodes, expected calls and tokens, and their cost."""

    label: str
    benchmark: str
    method: str
    backbone: str
    episodes: int
    episodes_done: int
    calls: Estimate
    prompt_tokens: Estimate
    completion_tokens: Estimate
    price_per_mtok: dict[str, float] | None
    price_source: str
    unit: str = "episodes"  # what ``episodes`` counts (an ARC study's rows: solver and evaluation calls)

    @property
    def cost_usd(self) -> float | None:
        if self.price_per_mtok is None:
            return None
        p = self.price_per_mtok
        return (self.prompt_tokens.value * p["input"] + self.completion_tokens.value * p["output"]) / 1e6

    @property
    def tokens(self) -> float:
        return self.prompt_tokens.value + self.completion_tokens.value


def plan_run(
    *,
    label: str,
    benchmark: str,
    method: str,
    backbone: str,
    episodes: int,
    max_steps: int,
    rates: Rates,
    price: tuple[dict[str, float] | None, str],
    episodes_done: int = 0,
    calls_per_episode: Estimate | None = None,
) -> PlannedRun:
    """A run of ``episodes`` episodes at the rates' calls per episode (or the given one) and tokens per call."""
    per_episode = calls_per_episode or rates.calls_per_episode(benchmark, method, backbone, max_steps)
    calls = per_episode.value * episodes
    prompt, completion = rates.tokens_per_call(benchmark, method, backbone)
    return PlannedRun(
        label,
        benchmark,
        method,
        backbone,
        episodes,
        episodes_done,
        Estimate(calls, per_episode.source),
        Estimate(prompt.value * calls, prompt.source),
        Estimate(completion.value * calls, completion.source),
        price[0],
        price[1],
    )


def backbone_price(backbone: str) -> tuple[dict[str, float] | None, str]:
    """The backbone profile's ``price_per_mtok`` and where it came from (a label without a profile: none)."""
    from antipersist_lib.serving.profiles import load_profile, profile_file

    if backbone.startswith("embedded"):
        return {"input": 0.0, "output": 0.0}, "the embedded default runs on this machine: no charge"
    if not profile_file("backbones", backbone).is_file():
        return None, f"no backbone profile {backbone!r}: no price"
    data = load_profile("backbones", backbone)
    if "price_per_mtok" not in data:
        return (
            None,
            f"params/backbones/{backbone}.yaml gives no price_per_mtok (set it for a cost; self-served: GPU hours)",
        )
    return {k: float(v) for k, v in data["price_per_mtok"].items()}, f"params/backbones/{backbone}.yaml price_per_mtok"


@dataclass
class Plan:
    """A job's planned runs; ``throughput`` (tokens/s per endpoint, prompt and completion together) gives times."""

    job: str
    runs: list[PlannedRun]
    throughput: float | None = None
    notes: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        costs = [r.cost_usd for r in self.runs]
        by_backbone: dict[str, float] = {}
        for r in self.runs:
            by_backbone[r.backbone] = by_backbone.get(r.backbone, 0.0) + r.tokens
        return {
            "runs": len(self.runs),
            "episodes": sum(r.episodes for r in self.runs),
            "episodes_done": sum(r.episodes_done for r in self.runs),
            "calls": sum(r.calls.value for r in self.runs),
            "prompt_tokens": sum(r.prompt_tokens.value for r in self.runs),
            "completion_tokens": sum(r.completion_tokens.value for r in self.runs),
            "cost_usd": None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
            "priced_cost_usd": sum(c for c in costs if c is not None),
            "unpriced_runs": sum(c is None for c in costs),
            # endpoints work side by side: the job takes as long as its busiest endpoint
            "hours": None if not self.throughput else max(by_backbone.values(), default=0.0) / self.throughput / 3600,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "throughput_tokens_per_s": self.throughput,
            "notes": self.notes,
            "totals": self.totals(),
            "runs": [{**asdict(r), "cost_usd": r.cost_usd} for r in self.runs],
        }

    def render(self, *, per_run: bool = True) -> str:
        t = self.totals()
        lines = [f"plan for {self.job}: nothing is started", *self.notes]
        root = _common_folder([r.label for r in self.runs])
        unit = self.runs[0].unit if self.runs else "episodes"
        if per_run:
            lines.append(f"runs under {root}/" if root else "runs:")
            lines.append(
                f"{'run':<72} {self.runs[0].unit if self.runs else 'episodes':>9} {'calls':>10} {'in tok':>12} {'out tok':>11} {'USD':>10}"
            )
            for r in self.runs:
                usd = "-" if r.cost_usd is None else f"{r.cost_usd:,.2f}"
                done = f" ({r.episodes_done} done)" if r.episodes_done else ""
                lines.append(
                    f"{_short(r.label, root, 72):<72} {r.episodes:>9,} {r.calls.value:>10,.0f} {r.prompt_tokens.value:>12,.0f} "
                    f"{r.completion_tokens.value:>11,.0f} {usd:>10}{done}"
                )
        lines.append(
            f"total: {t['runs']} runs, {t['episodes']:,} {unit} ({t['episodes_done']:,} already recorded), "
            f"{t['calls']:,.0f} calls, {t['prompt_tokens']:,.0f} input + {t['completion_tokens']:,.0f} output tokens"
        )
        if t["cost_usd"] is not None:
            lines.append(f"cost: {t['cost_usd']:,.2f} USD at the profiles' prices")
        else:
            lines.append(
                f"cost: {t['priced_cost_usd']:,.2f} USD for the priced runs; {t['unpriced_runs']} run(s) have no price "
                "(price_per_mtok in their backbone profile)"
            )
        if t["hours"] is not None:
            lines.append(
                f"time: {t['hours']:,.1f} h at {self.throughput:,.0f} tokens/s per endpoint (endpoints in parallel)"
            )
        else:
            lines.append("time: give --throughput TOKENS_PER_S (per endpoint) for hours")
        lines.append("where the numbers come from (runs each):")
        for what, sources in (
            ("calls", [r.calls.source for r in self.runs]),
            ("tokens per call", [r.prompt_tokens.source for r in self.runs]),
            ("price", [r.price_source for r in self.runs]),
        ):
            lines.append(f"  {what}:")
            if not per_run:  # the kinds of source only; every run's own is in the per-run listing
                sources = [re.sub(r" \(.*|: .* not in it$", "", x) for x in sources]
            for source in sorted(set(sources), key=lambda x: (-sources.count(x), x)):
                lines.append(f"    {sources.count(source):>4} x {source}")
        return "\n".join(lines)


def _common_folder(labels: Sequence[str]) -> str:
    import os

    if not labels:
        return ""
    common = os.path.commonpath(labels) if len(labels) > 1 else str(Path(labels[0]).parent)
    return common


def _short(label: str, root: str, width: int) -> str:
    text = label[len(root) + 1 :] if root and label.startswith(root + "/") else label
    return text if len(text) <= width else "..." + text[-(width - 3) :]


def actual_beside_plan(plan: Plan) -> str:
    """After a job: each planned run's ledger (calls, tokens, cost at the same prices) beside its plan."""
    root = _common_folder([r.label for r in plan.runs])
    lines = [
        f"runs under {root}/",
        f"{'run':<60} {'calls plan':>11} {'actual':>9} {'tokens plan':>13} {'actual':>12} {'USD actual':>11}",
    ]
    totals = [0.0, 0.0, 0.0, 0.0, 0.0]
    for r in plan.runs:
        rec = RecordedRun.read(Path(r.label))
        calls = rec.calls if rec else 0
        tokens = (rec.prompt_tokens + rec.completion_tokens) if rec else 0
        cost = None
        if rec and r.price_per_mtok is not None:
            cost = (
                rec.prompt_tokens * r.price_per_mtok["input"] + rec.completion_tokens * r.price_per_mtok["output"]
            ) / 1e6
        usd = "-" if cost is None else f"{cost:,.2f}"
        lines.append(
            f"{_short(r.label, root, 60):<60} {r.calls.value:>11,.0f} {calls:>9,} {r.tokens:>13,.0f} {tokens:>12,} {usd:>11}"
        )
        for i, v in enumerate((r.calls.value, calls, r.tokens, tokens, cost or 0.0)):
            totals[i] += v
    lines.append(
        f"{'total':<60} {totals[0]:>11,.0f} {totals[1]:>9,.0f} {totals[2]:>13,.0f} {totals[3]:>12,.0f} {totals[4]:>11,.2f}"
    )
    return "\n".join(lines)


def plan_specs(job: str, specs: Sequence[Any], *, roots: Sequence[Path], throughput: float | None = None) -> Plan:
    """The plan of a list of ``RunSpec`` (a grid's or a main-job profile's runs): episodes from each run's own
    task lists (``runner.spec.run_episode_counts``), rates from the runs under ``roots``."""
    from antipersist_lib.runner.spec import run_episode_counts

    rates = Rates(recorded_runs(roots))
    prices: dict[str, tuple[dict[str, float] | None, str]] = {}
    runs = []
    for spec in specs:
        train, heldout = run_episode_counts(spec)
        episodes = spec.iterations * (train + heldout)
        folder = spec.run_dir()
        done = sum(_countrecords(folder / name) for name in ("episodes_train.jsonl", "episodes_heldout.jsonl"))
        if spec.backbone not in prices:
            prices[spec.backbone] = backbone_price(spec.backbone)
        runs.append(
            plan_run(
                label=str(folder),
                benchmark=spec.benchmark,
                method=spec.method,
                backbone=spec.backbone,
                episodes=episodes,
                episodes_done=min(done, episodes),
                max_steps=spec.max_steps,
                rates=rates,
                price=prices[spec.backbone],
            )
        )
    notes = [f"rates from {len(rates.runs)} recorded run(s) under {', '.join(str(r) for r in roots)}"]
    return Plan(job, runs, throughput, notes)


# -- studies counted by call purpose (the faulty-memories studies) -----------------------------------------


@dataclass(frozen=True)
class PurposeRate:
    """Tokens per call of one purpose, pooled over study ledgers."""

    calls: int
    prompt_per_call: float
    completion_per_call: float
    source: str


def purpose_rates(roots: Iterable[Path], ledger_name: str = "ledger.jsonl") -> dict[str, PurposeRate]:
    """Per purpose, the mean prompt and completion tokens of the ok calls in every ``ledger_name`` under ``roots``."""
    sums: dict[str, list[int]] = {}
    files: set[Path] = set()
    for root in roots:
        if root.is_dir():
            files.update(p.resolve() for p in root.rglob(ledger_name))
    for path in sorted(files):
        for line in records(path):
            if not line.get("ok", True) or line.get("purpose") in NOT_CHAT:
                continue
            acc = sums.setdefault(str(line.get("purpose")), [0, 0, 0])
            acc[0] += 1
            acc[1] += int(line.get("prompt_tokens", 0) or 0)
            acc[2] += int(line.get("completion_tokens", 0) or 0)
    return {
        purpose: PurposeRate(n, p / n, c / n, f"measured: {n} {purpose} calls in {len(files)} recorded study ledger(s)")
        for purpose, (n, p, c) in sums.items()
        if n
    }


def plan_purposes(
    *,
    label: str,
    backbone: str,
    calls: dict[str, float],
    rates: dict[str, PurposeRate],
    calls_source: str,
    price: tuple[dict[str, float] | None, str],
    units: int,
    unit: str,
) -> PlannedRun:
    """A study row whose calls are counted per purpose (``calls``); tokens from that purpose's rate, else any
    purpose's pooled rate, else ``ASSUMED_TOKENS``."""
    prompt = completion = 0.0
    sources = set()
    pooled = [r for r in rates.values()]
    for purpose, n in calls.items():
        rate = rates.get(purpose)
        if rate is None and pooled:
            total = sum(r.calls for r in pooled)
            rate = PurposeRate(
                total,
                sum(r.prompt_per_call * r.calls for r in pooled) / total,
                sum(r.completion_per_call * r.calls for r in pooled) / total,
                f"measured: {total} calls of other purposes in recorded study ledgers ({purpose} has none)",
            )
        if rate is None:
            rate = PurposeRate(0, float(ASSUMED_TOKENS[0]), float(ASSUMED_TOKENS[1]),
                               f"assumed: {ASSUMED_TOKENS[0]} prompt / {ASSUMED_TOKENS[1]} completion tokens a call")  # fmt: skip
        prompt += n * rate.prompt_per_call
        completion += n * rate.completion_per_call
        sources.add(rate.source.split(" in ")[0] if rate.calls else rate.source)
    token_source = "; ".join(sorted(sources)) or "no calls"
    return PlannedRun(
        label,
        "",
        ", ".join(f"{k} {v:,.0f}" for k, v in calls.items() if v),
        backbone,
        units,
        0,
        Estimate(sum(calls.values()), calls_source),
        Estimate(prompt, token_source),
        Estimate(completion, token_source),
        price[0],
        price[1],
        unit,
    )
