"""What the faulty-memories study runners share: profile checks, the models, restarts, the manifest.

``arc.study`` (ARC-AGI Stream) and ``consolidation.study`` (consolidators over trajectory pools) each
read a YAML profile, open a backbone (an explicit endpoint, the embedded default started here, or a
backbone profile of ``params/backbones/``), run resumably into one folder, and describe the run in a
``study.json`` manifest. The pieces that must behave the same in both live here, so that a malformed
profile is reported the same way, the embedded server is restarted the same way, and every manifest
carries the same provenance (backbone, endpoints without keys, package versions, git commit, prompt
hashes, wall time across resumed invocations).

``StudyRun`` is the one skeleton of a run (``arc.study``, ``arc.probes``, ``consolidation.study``): the folder and
its clock, the models and the clients with their response caches, the ledger, units skipped when already done,
restarts, the manifest and the results files. ``StudyCommand`` is the command line every runner gets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from antipersist_lib.errors import InfrastructureError, LLMUnavailableError
from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.profile_fields import Checker
from antipersist_lib.serving.embedded import BACKBONE_OPTION_KEYS  # noqa: F401  (re-exported for the study profiles)
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.serving.response_cache import ResponseCache, model_cache

if TYPE_CHECKING:
    import pandas as pd

#: ``backbone: embedded`` starts the embedded default (a registry model on the kit's llama.cpp build)
EMBEDDED = "embedded"
#: keys a profile's ``backbone_options`` may set for the embedded server (model, server, threads, n_ctx, ...):
#: ``serving.embedded.BACKBONE_OPTION_KEYS``, re-exported here for the study profiles' checks
#: how often a study restarts an embedded server that died under it before giving up
MAX_BACKBONE_RESTARTS = 3
#: the files every study folder holds (beside its own units' folders)
MANIFEST_FILE = "study.json"
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"
LEDGER_FILE = "ledger.jsonl"
CACHE_DIR = "cache"


class StudyProfileError(ValueError):
    """A study profile is malformed; the message names the file and the key."""


# -- profile checks (every message names the file and the key) ---------------------------------------


def fail(path: Any, message: str) -> StudyProfileError:
    return StudyProfileError(f"study profile {path}: {message}")


def checker(path: Any) -> Checker:
    """The ``profile_fields.Checker`` of a study profile: its errors are ``fail(path, ...)``."""
    return Checker(path, lambda message: fail(path, message))


def read_profile(path: Path, keys: set[str]) -> dict[str, Any]:
    """The profile's top-level mapping; a missing file, bad YAML or an unknown top-level key is named."""
    from antipersist_lib.serving.profiles import read_mapping

    try:
        return read_mapping(path, keys)
    except ValueError as exc:
        raise StudyProfileError(f"study profile {exc}") from None


def check_backbone(data: dict[str, Any], path: Any) -> str:
    """``backbone``: ``embedded`` (the default), a backbone profile name in ``params/backbones/``, or a backbone
    profile file (a path, ``serving.profiles.is_profile_path``), which is read and checked here."""
    backbone = data.get("backbone", EMBEDDED)
    if not isinstance(backbone, str) or not backbone:
        raise fail(
            path,
            f"'backbone' must be 'embedded' or a profile name in params/backbones/ or a profile file (.yaml), "
            f"got {backbone!r}",
        )
    _check_profile_file("backbones", backbone, "backbone", path)
    return backbone


def check_embedding(data: dict[str, Any], path: Any, default: str) -> str:
    """``embedding``: a profile name in ``params/embeddings/``, a profile file (checked here), or ``embedded``
    (the in-process MiniLM embedder, with any backbone)."""
    embedding = data.get("embedding", default)
    if not isinstance(embedding, str) or not embedding:
        raise fail(
            path,
            f"'embedding' must be a profile name in params/embeddings/, a profile file (.yaml) or 'embedded', "
            f"got {embedding!r}",
        )
    _check_profile_file("embeddings", embedding, "embedding", path)
    return embedding


def _check_profile_file(kind: str, value: str, key: str, path: Any) -> None:
    from antipersist_lib.serving.profiles import is_profile_path, load_profile

    if is_profile_path(value):
        try:
            load_profile(kind, value)
        except ValueError as exc:
            raise fail(path, f"{key!r}: {exc}") from None


def check_list(value: Any, key: str, path: Any) -> list[Any]:
    """A scalar or a non-empty list, as a list."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise fail(path, f"{key!r} must list at least one value")
    return items


# -- the models ---------------------------------------------------------------------------------------


@dataclass
class StudyModels:
    """The chat endpoint (and, for studies that embed, the embedding endpoint) a study runs on."""

    endpoint: Endpoint
    label: str
    embedded: bool
    server: Any = None  # the EmbeddedBackbone when embedded (restarted by ``with_restarts``)
    embed_endpoint: Endpoint | None = None
    embed_label: str | None = None
    #: check the endpoints before the study's first piece of work (``check_endpoints``); off only explicitly
    preflight: bool = True
    _checked: set[str] = field(default_factory=set)

    def check_endpoints(self, what: str, *, embeddings: bool = True) -> None:
        """The study's preflight (``serving.preflight``), once per invocation and endpoint, before the first
        piece of work that needs it: one small chat request, and (``embeddings``, when the study has an
        embedding endpoint) one embedding request. ``PreflightError`` names the endpoint that failed. Does
        nothing when ``preflight`` is off or the endpoint already passed."""
        if not self.preflight:
            return
        from antipersist_lib.serving.preflight import Probe, run_preflight

        probes = [Probe("chat", self.endpoint, f"backbone {self.label}")]
        if embeddings and self.embed_endpoint is not None:
            probes.append(Probe("embedding", self.embed_endpoint, f"embedding {self.embed_label}"))
        probes = [p for p in probes if p.kind not in self._checked]
        if probes:
            run_preflight(probes, what=what)
            self._checked.update(p.kind for p in probes)

    @property
    def note(self) -> str:
        """The weak-model note when the embedded default runs, else ""."""
        if not self.embedded:
            return ""
        from antipersist_lib.serving.embedded import WEAK_MODEL_NOTE

        return WEAK_MODEL_NOTE


@contextlib.contextmanager
def open_models(
    path: Any,
    backbone: str | Endpoint,
    out: Path,
    *,
    backbone_options: dict[str, Any] | None = None,
    endpoint: Endpoint | None = None,
    embedding: str | None = None,
    embed_endpoint: Endpoint | None = None,
    preflight: bool = True,
) -> Iterator[StudyModels]:
    """The models a study uses: ``endpoint`` when given; else the profile's ``backbone`` (``embedded`` starts
    the embedded default here, with its server log in ``out``; any other value is a backbone profile, by name
    or file; an ``Endpoint`` is an ad-hoc endpoint from ``--base-url/--model``, labelled by its model). With
    ``embedding`` (a profile name or file, or ``embedded``) the study also gets an embedding endpoint:
    ``embed_endpoint`` when given, the embedded embedder beside the embedded backbone or for
    ``embedding: embedded`` (started here), else that embeddings profile. ``preflight`` is handed to the
    models (``StudyModels.check_endpoints``)."""
    wants_embeddings = embedding is not None or embed_endpoint is not None
    if endpoint is not None:
        label = backbone if isinstance(backbone, str) and backbone != EMBEDDED else endpoint.model
        emb = (embed_endpoint or endpoint) if wants_embeddings else None
        emb_label = (embed_endpoint.model if embed_endpoint is not None else embedding) if wants_embeddings else None
        yield StudyModels(endpoint, label, False, None, emb, emb_label, preflight=preflight)
        return
    if backbone == EMBEDDED:
        from threadpoolctl import threadpool_limits

        from antipersist_lib.serving.embedded import EMBEDDER_MODEL, EmbeddedBackbone, EmbeddedEmbedder

        server = EmbeddedBackbone.from_options(backbone_options or {}, log_path=out / "llama_server.log")
        with threadpool_limits(limits=1), server:
            if not wants_embeddings or embed_endpoint is not None:
                emb_label = embed_endpoint.model if embed_endpoint is not None else None
                yield StudyModels(
                    server.endpoint, server.label, True, server, embed_endpoint, emb_label, preflight=preflight
                )
                return
            with EmbeddedEmbedder() as em:
                yield StudyModels(
                    server.endpoint, server.label, True, server, em.endpoint, EMBEDDER_MODEL, preflight=preflight
                )
        return
    from antipersist_lib.serving.profiles import EMBEDDED as IN_PROCESS_EMBEDDER
    from antipersist_lib.serving.profiles import adhoc_label, backbone_endpoint, embedding_endpoint

    in_process = wants_embeddings and embed_endpoint is None and embedding == IN_PROCESS_EMBEDDER
    try:
        if isinstance(backbone, Endpoint):
            chat, label = backbone, adhoc_label(backbone.model)
        else:
            chat, label = backbone_endpoint(backbone), backbone
        emb = (embed_endpoint or embedding_endpoint(embedding)) if wants_embeddings and not in_process else None  # type: ignore[arg-type]
    except ValueError as exc:
        what = "'backbone' / 'embedding'" if wants_embeddings else "'backbone'"
        raise fail(path, f"{what}: {exc}") from None
    if in_process:
        from antipersist_lib.serving.embedded import EmbeddedEmbedder

        with EmbeddedEmbedder() as em:
            yield StudyModels(chat, label, False, None, em.endpoint, IN_PROCESS_EMBEDDER, preflight=preflight)
        return
    emb_label = (embed_endpoint.model if embed_endpoint is not None else embedding) if wants_embeddings else None
    yield StudyModels(chat, label, False, None, emb, emb_label, preflight=preflight)


def with_restarts(
    models: StudyModels, what: str, fn: Callable[[], Any], *, before: Callable[[], None] | None = None, log: Any = print
) -> Any:
    """Run ``fn`` (after ``before``, e.g. clearing a half-written folder); when the embedded llama.cpp server
    died under it, restart the server and run both again, up to ``MAX_BACKBONE_RESTARTS`` times. Any other
    unavailable endpoint, or a server that keeps dying, raises."""
    for attempt in range(MAX_BACKBONE_RESTARTS + 1):
        if before is not None:
            before()
        try:
            return fn()
        except LLMUnavailableError as exc:
            code = None if models.server is None else models.server.exit_code
            if code is None:
                raise
            report = models.server.crash_report(f"it died during {what}")
            if attempt == MAX_BACKBONE_RESTARTS:
                from antipersist_lib.errors import EmbeddedServerError

                raise EmbeddedServerError(f"{report}\n(it died {attempt + 1} times; completed work is saved)") from exc
            log(f"{report}\nrestarting it and resuming")
            models.server.restart()
    raise AssertionError("unreachable")  # pragma: no cover


# -- the manifest and resume bookkeeping -------------------------------------------------------------


def manifest_base(
    study: str, study_format: int, profile_path: str, name: str, raw: dict[str, Any], models: StudyModels, status: str
) -> dict[str, Any]:
    """The provenance every study manifest starts with; endpoints name their API-key variable, never a key."""
    from antipersist_lib.versions import git_commit, package_versions

    out = {
        "kit": "antipersist",
        "study": study,
        "format": study_format,
        "status": status,
        "name": name,
        "profile_path": profile_path,
        "profile": raw,
        "backbone": models.label,
        "embedded": models.embedded,
        "note": models.note,
        "endpoint": models.endpoint.describe(),
    }
    if models.server is not None:
        out["embedded_backbone"] = models.server.describe()
    if models.embed_endpoint is not None:
        out["embedding"] = models.embed_label
        out["embedding_endpoint"] = models.embed_endpoint.describe()
    out.update({"versions": package_versions(), "git_commit": git_commit()})
    return out


def previous_wall_s(out: Path) -> float:
    """Seconds the earlier invocations into ``out`` took (its manifest), so a resumed study reports its whole cost."""
    try:
        m = json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0.0
    return float(m.get("wall_s_total", m.get("wall_s", 0.0)) or 0.0) if isinstance(m, dict) else 0.0


def obtain_folder(
    mode: str,
    folder: str | Path,
    *,
    profile: str | Path | None,
    root: str | Path | None,
    out_root: str | Path,
    run: Callable[[Path, Path], Any],
    results_file: str,
    what: str,
) -> Path | None:
    """A notebook's run-or-load step for one study folder. "paper": None; "load": ``folder`` (its
    ``results_file`` must exist); "run": ``run(profile, out)`` into ``<out_root>/<profile name>`` (resuming) and
    return that folder. Relative paths are taken from ``root`` (default: the repository). ``what`` names the
    study in errors ("study", "probe")."""
    from antipersist_lib.paths import repo_root

    base = Path(root) if root is not None else repo_root()
    if mode == "paper":
        return None
    if mode == "load":
        path = base / folder
        if not (path / results_file).exists():
            raise FileNotFoundError(f"no {what} results at {path}: run the {what} first or point the folder elsewhere")
        return path
    if mode == "run":
        if not profile:
            raise ValueError(f"mode 'run' needs a {what} profile (params/arc/*.yaml)")
        out = base / out_root / Path(profile).stem
        run(base / profile, out)
        return out
    raise ValueError(f"mode must be one of ('paper', 'load', 'run'), got {mode!r}")


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def relative_to(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` when inside it (so a study folder can be moved), else as given."""
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return str(path)


def clear_incomplete(folder: Path, written: set[str], what: str) -> None:
    """Remove an unfinished unit's folder before it is run again, unless it holds files the runner did not write
    (``written``): then refuse, naming them, rather than delete someone's files. ``what`` names the unit
    ("condition", "probe stream")."""
    if not folder.exists():
        return
    foreign = sorted(p.name for p in folder.iterdir() if p.name not in written)
    if foreign:
        raise FileExistsError(
            f"{folder} is an incomplete {what} folder holding files the runner did not write ({foreign}); "
            "move them away or use a fresh --out"
        )
    shutil.rmtree(folder)


def write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    """``<out>/study.json``, written atomically (a reader never sees half of it)."""
    atomic_write_json(out / MANIFEST_FILE, manifest)


def write_results(out: Path, payload: dict[str, Any], frame: pd.DataFrame) -> None:
    """A study folder's results: ``results.json`` (``payload``, its ``rows`` and whatever the study adds) and
    ``results.csv`` (``frame``, the same rows as a table)."""
    atomic_write_json(out / RESULTS_JSON, payload)
    frame.to_csv(out / RESULTS_CSV, index=False)


# -- one invocation of a study runner ----------------------------------------------------------------


@dataclass
class StudyRun:
    """One invocation of a study runner into its folder ``out``: what every runner of the faulty-memories study
    shares, so that each runs, resumes and records the same way.

    ``StudyRun.begin`` makes the folder and starts the clock (the wall time of the earlier invocations into the
    folder is read from its manifest); ``connect`` opens the models (``open_models``) and the folder's ledger.
    Then: ``client`` makes a chat client that records into the ledger and answers from the response cache
    (``cache/``, or ``cache/<model>/`` with ``per_model_cache``); ``unit`` runs one resumable piece of work
    (skipped when its done-file exists; preflight, ledger tags, restarts of a dead embedded server);
    ``manifest`` / ``write_manifest`` / ``write_results`` write the folder's records, with ``wall`` the time of
    this invocation and of every invocation into the folder."""

    profile: Any  # the loaded study profile: its ``path``, ``name``, ``raw``, ``backbone``, ``backbone_options``
    out: Path
    what: str = "study"  # how the run names itself in its log and preflight lines ("study", "probes")
    log: Callable[[str], Any] = print
    started: float = field(default_factory=time.monotonic)
    before_s: float = 0.0
    started_at: str = ""
    response_cache: bool = True
    per_model_cache: bool = False
    _models: StudyModels | None = None
    _ledger: Ledger | None = None

    @classmethod
    def begin(cls, profile: Any, out: Path, *, what: str = "study", log: Callable[[str], Any] = print) -> StudyRun:
        """Make ``out`` (resuming what it holds) and start the clock."""
        out.mkdir(parents=True, exist_ok=True)
        return cls(profile, out, what, log, time.monotonic(), previous_wall_s(out), utc_now())

    @contextlib.contextmanager
    def connect(
        self,
        *,
        backbone: str | Endpoint | None = None,
        endpoint: Endpoint | None = None,
        embedding: str | None = None,
        embed_endpoint: Endpoint | None = None,
        preflight: bool = True,
        response_cache: bool = True,
        per_model_cache: bool = False,
    ) -> Iterator[StudyRun]:
        """Open the models (``open_models``: ``backbone`` replaces the profile's) for the block, and close the
        folder's ledger after it; ``response_cache`` keeps every reply in ``cache/`` (``per_model_cache``: one
        folder per model)."""
        self.response_cache, self.per_model_cache = response_cache, per_model_cache
        with open_models(
            self.profile.path,
            self.profile.backbone if backbone is None else backbone,
            self.out,
            backbone_options=self.profile.backbone_options,
            endpoint=endpoint,
            embedding=embedding,
            embed_endpoint=embed_endpoint,
            preflight=preflight,
        ) as models:
            self._models = models
            try:
                yield self
            finally:
                if self._ledger is not None:
                    self._ledger.close()
                self._models, self._ledger = None, None

    @property
    def models(self) -> StudyModels:
        if self._models is None:
            raise RuntimeError("the study run is not connected: use it inside `with run.connect(...)`")
        return self._models

    @property
    def ledger(self) -> Ledger:
        """The folder's ``ledger.jsonl``, opened at its first use (a run refused before any call writes none)."""
        if self._models is None:
            raise RuntimeError("the study run is not connected: use it inside `with run.connect(...)`")
        if self._ledger is None:
            self._ledger = Ledger(self.out / LEDGER_FILE)
        return self._ledger

    @property
    def where(self) -> str:
        """``<what> <out>``: how the run names itself (preflight errors, log lines)."""
        return f"{self.what} {self.out}"

    # -- clients and their caches

    def cache(self, model: str | None = None) -> ResponseCache | None:
        """The response cache of ``model``'s replies (None when the run keeps none)."""
        if not self.response_cache:
            return None
        if self.per_model_cache and model:
            return model_cache(self.out / CACHE_DIR, model)  # as the study's protocol runs file it
        return ResponseCache(self.out / CACHE_DIR)

    def client(self, endpoint: Endpoint | None = None, *, seed: int | None = None) -> LLMClient:
        """A chat client for ``endpoint`` (default: the study's backbone) recording into the ledger, answered
        from its model's response cache."""
        ep = endpoint if endpoint is not None else self.models.endpoint
        return LLMClient(ep, ledger=self.ledger, cache=self.cache(ep.model), seed=seed)

    # -- resumable work

    def check_endpoints(self, *, embeddings: bool = True) -> None:
        """The preflight (``StudyModels.check_endpoints``) before a piece of work that calls a model."""
        self.models.check_endpoints(self.where, embeddings=embeddings)

    def restarts(self, what: str, fn: Callable[[], Any], *, before: Callable[[], None] | None = None) -> Any:
        """``fn()``, restarting a dead embedded server and running it again (``with_restarts``)."""
        return with_restarts(self.models, what, fn, before=before, log=self.log)

    def unit(
        self,
        name: str,
        done: Path,
        fn: Callable[[], Any],
        *,
        what: str,
        clear: Callable[[], None] | None = None,
        tags: dict[str, Any] | None = None,
        position: tuple[int, int] | None = None,
        embeddings: bool = True,
        check: Callable[[], None] | None = None,
    ) -> bool:
        """Run one resumable unit of the study (a condition, a stream, a build) unless its ``done`` file exists
        (then it is kept, and False returned). Otherwise: the preflight (``check`` after it, e.g. another
        model's), ``clear`` (an unfinished folder) and ``fn`` under the ledger's ``tags``, both again after a
        restart of a dead embedded server (``what`` names the unit in the crash report); True."""
        if done.exists():
            self.log(f"{name}: complete, kept")
            return False
        self.check_endpoints(embeddings=embeddings)
        if check is not None:
            check()
        self.log(f"{name}{f' ({position[0]} of {position[1]})' if position else ''}: started")
        t0 = time.monotonic()
        with self.ledger.tag(**(tags or {})):
            self.restarts(what, fn, before=clear)
        self.log(f"{name}: done in {time.monotonic() - t0:.0f} s")
        return True

    # -- the folder's records

    def calls(self) -> dict[str, int]:
        """The ledger's calls by purpose, sorted."""
        return dict(sorted(Counter(r.purpose for r in self.ledger.records).items()))

    def cached_calls(self) -> int:
        return sum(r.cached for r in self.ledger.records)

    def wall(self) -> dict[str, float]:
        """``wall_s``: this invocation; ``wall_s_total``: every invocation into this folder."""
        wall = time.monotonic() - self.started
        return {"wall_s": round(wall, 1), "wall_s_total": round(self.before_s + wall, 1)}

    def manifest(self, study: str, study_format: int, status: str) -> dict[str, Any]:
        """The manifest's provenance (``manifest_base``) for this run's profile and models."""
        p = self.profile
        return manifest_base(study, study_format, p.path, p.name, p.raw, self.models, status)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_manifest(self.out, manifest)

    def write_results(self, payload: dict[str, Any], frame: pd.DataFrame) -> None:
        write_results(self.out, payload, frame)


# -- the command line ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StudyCommand:
    """``python -m antipersist_lib <command>`` for one study runner: ``--profile`` / ``--out`` (default
    ``outputs/<study>/<profile name>``): run or resume the study, print ``show(result)`` and the wall time; a
    malformed profile or a missing input exits 2 with the message, an endpoint that does not answer (its
    preflight) exits 3, a grader that cannot isolate model-written code exits 4. ``--base-url URL --model NAME``
    (with ``--api-key-env``, ``--context-length``, ``--request-shape``) replace the profile's backbone by an
    ad-hoc chat endpoint, handed to ``run`` as ``backbone=``. ``--plan [--throughput N] [--totals]``: print
    ``plan(profile, out, throughput=N)`` (an ``analysis.plan.Plan``) and start nothing.

    ``main(argv)`` parses its own arguments; ``execute(args)`` takes them already parsed (the kit's ``cli``
    declares the same options on its subcommands and calls it directly)."""

    study: str
    command: str
    description: str
    run: Callable[..., Any]
    show: Callable[[Any], Any]
    plan: Callable[..., Any] | None = None

    def parser(self) -> argparse.ArgumentParser:
        from antipersist_lib.serving.profiles import add_endpoint_arguments

        parser = argparse.ArgumentParser(prog=f"python -m antipersist_lib {self.command}", description=self.description)
        parser.add_argument("--profile", required=True, help=f"a study profile, e.g. params/{self.study}/smoke.yaml")
        parser.add_argument("--out", help=f"output folder (default outputs/{self.study}/<profile name>)")
        add_endpoint_arguments(parser)
        if self.plan is not None:
            parser.add_argument("--plan", action="store_true", help="start nothing: print the calls, tokens and cost")
            parser.add_argument("--throughput", type=float, metavar="TOKENS_PER_S", help="with --plan: for hours")
            parser.add_argument("--totals", action="store_true", help="with --plan: the totals only")
        return parser

    def main(self, argv: Sequence[str] | None = None) -> int:
        return self.execute(self.parser().parse_args(argv))

    def execute(self, args: argparse.Namespace) -> int:
        import math
        import sys

        from antipersist_lib.errors import LLMError
        from antipersist_lib.serving.profiles import endpoint_from_arguments

        out = Path(args.out) if args.out else Path("outputs") / self.study / Path(args.profile).stem
        if self.plan is not None and getattr(args, "plan", False):
            try:
                plan = self.plan(args.profile, out, throughput=getattr(args, "throughput", None))
                print(plan.render(per_run=not getattr(args, "totals", False)))
            except (ValueError, FileNotFoundError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            return 0
        t0 = time.monotonic()
        try:
            adhoc = endpoint_from_arguments(args)
            result = self.run(args.profile, out, **({"backbone": adhoc} if adhoc is not None else {}))
        except (ValueError, FileNotFoundError, FileExistsError) as exc:  # StudyProfileError is a ValueError
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except LLMError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
        except InfrastructureError as exc:  # e.g. the ARC sandbox cannot isolate model-written code here
            print(f"error: {exc}", file=sys.stderr)
            return 4
        import pandas as pd

        with pd.option_context("display.width", 160, "display.max_columns", 20):
            print(self.show(result).to_string(index=False))
        print(f"study written to {out} in {math.ceil(time.monotonic() - t0)} s")
        return 0
