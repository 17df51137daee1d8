"""Named backbone and embedding profiles (``params/backbones/*.yaml``, ``params/embeddings/*.yaml``).

A profile gives a base URL, a model name, a context length and the *name* of the variable holding the API key
(never the key); backbone profiles may also set the agent's decoding (``agent_decoding``). The base URL
(``resolve_base_url``) comes from the profile's ``base_url_env`` variable, then the global override of its kind,
then ``base_url``; a URL carrying credentials is refused. ``ANTIPERSIST_PARAMS`` points at another params folder.
Wherever a profile name is accepted a profile file is too: ``is_profile_path`` is the one rule telling them
apart, ``profile_label`` names a file's runs, ``EMBEDDED`` is the in-process embedder, and ``adhoc_endpoint``
builds the endpoint of ``--base-url URL --model NAME``. Documented in docs/protocol.md, "Backbones and vLLM
servers" and "Bring your own server".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from antipersist_lib.paths import safe_file_name
from antipersist_lib.profile_fields import INT, NUMBER, STR, TEXT, Checker, Field, Fields
from antipersist_lib.serving.llm import Endpoint

ENDPOINT_KEYS = (
    "api_key_env",
    "context_length",
    "timeout_s",
    "max_retries",
    "backoff_base_s",
    "backoff_max_s",
    "system_prompt",
    "request_shape",
)
#: profile keys that describe the model, for people: what the paper says and what it costs (``--plan``)
INFO_KEYS = ("paper", "price_per_mtok")
DECODING_KEYS = ("temperature", "top_p")
PROFILE_KEYS = {"name", "model", "base_url", "base_url_env", *ENDPOINT_KEYS, *DECODING_KEYS, *INFO_KEYS}
#: the variable that overrides the base URL of every profile of a kind
GLOBAL_URL_ENV = {"backbones": "ANTIPERSIST_BASE_URL", "embeddings": "ANTIPERSIST_EMBED_BASE_URL"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: file name endings that make a profile value a path (``is_profile_path``)
PROFILE_SUFFIXES = (".yaml", ".yml")
#: the embedding value that selects the in-process MiniLM embedder (started and stopped by the run)
EMBEDDED = "embedded"


def read_mapping(path: str | os.PathLike[str], allowed: set[str] | None = None) -> dict[str, Any]:
    """One YAML file holding a mapping; unreadable files, bad YAML, non-mappings and keys outside
    ``allowed`` raise ValueError naming the file (and the keys)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a mapping of settings")
    if allowed is not None:
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"{path}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    return data


def params_dir() -> Path:
    env = os.environ.get("ANTIPERSIST_PARAMS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "params"


def available(kind: str) -> list[str]:
    d = params_dir() / kind
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def is_profile_path(value: str) -> bool:
    """True when ``value`` names a profile *file* rather than a profile in ``params/<kind>/``: it ends in
    ``.yaml`` / ``.yml`` (any case) or contains a path separator. The one place this rule is decided."""
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return value.lower().endswith(PROFILE_SUFFIXES) or any(sep in value for sep in seps)


def profile_file(kind: str, value: str) -> Path:
    """The YAML file a profile value refers to: the path itself (``~`` expanded), or ``params/<kind>/<value>.yaml``."""
    return Path(value).expanduser() if is_profile_path(value) else params_dir() / kind / f"{value}.yaml"


def profile_label(value: str) -> str:
    """How a profile is named in run folders and manifests: a name as it is, a file by its stem
    (``./models/my-model.yaml`` -> ``my-model``). Reads no file."""
    return Path(value).stem if is_profile_path(value) else value


def adhoc_label(model: str) -> str:
    """The label of an ad-hoc endpoint (``--base-url/--model``): its model name with every character other
    than letters, digits, ``-``, ``_`` and ``.`` replaced by ``_`` (``Qwen/Qwen3-8B`` -> ``Qwen_Qwen3-8B``),
    so that it is one folder name and never reads as a profile file."""
    label = safe_file_name(model)
    return label.replace(".", "_") if is_profile_path(label) else label


def adhoc_endpoint(
    base_url: str,
    model: str,
    *,
    api_key_env: str | None = None,
    context_length: int | None = None,
    request_shape: str | None = None,
) -> Endpoint:
    """An OpenAI-compatible chat endpoint given on the command line, checked like a profile (errors name the
    flag). ``api_key_env`` is the *name* of the variable holding the key (default: none, so no key is sent
    to a URL the user did not name a key for);
    ``request_shape`` a preset name (``request_shape.PRESETS``)."""
    where = "--base-url/--model"
    data: dict[str, Any] = {"base_url": base_url, "model": model}
    if request_shape is not None:
        data["request_shape"] = request_shape
    if api_key_env is not None:
        if not _ENV_NAME.fullmatch(api_key_env):
            raise ValueError(
                f"{where}: --api-key-env must name the environment variable that holds the key "
                f"(e.g. MY_API_KEY), not the key itself; got {api_key_env!r}"
            )
        data["api_key_env"] = api_key_env
    if context_length is not None:
        data["context_length"] = context_length
    validate_profile(data, where)
    parsed = urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(
            f"{where}: --base-url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}"
        )
    return Endpoint(**data)


#: the fields of a backbone or embedding profile (a file's, or a grid's inline endpoint); the ranges the
#: ``Endpoint`` itself checks (positive timeout, retries >= 0, the system_prompt forms) are left to it
FIELDS = Fields(
    Field("name", TEXT),
    Field("model", STR, required=True),
    Field("base_url", STR, required=True),
    Field("base_url_env"),  # the name of an environment variable (checked below)
    Field("api_key_env", TEXT),
    Field("context_length", INT, minimum=1, what="a positive integer"),
    Field("timeout_s", NUMBER),
    Field("max_retries", INT),
    Field("backoff_base_s", NUMBER),
    Field("backoff_max_s", NUMBER),
    Field("system_prompt", TEXT),
    Field("request_shape"),  # a preset name (``request_shape.PRESETS``), checked by the Endpoint
    Field("temperature", NUMBER, minimum=0, maximum=2, what="a number in [0, 2] (the agent's range)"),
    Field("top_p", NUMBER, maximum=1, test=lambda v: v > 0, what="a number in (0, 1]"),
    Field("paper", TEXT, what="a string (what the papers say of this model)"),
    Field("price_per_mtok"),  # {input: USD, output: USD} (checked below)
)


def validate_profile(data: dict[str, Any], where: str) -> None:
    """Field types and ranges of a profile (a file's or a grid's inline endpoint); errors name
    ``where`` and the field."""
    Checker(where, label="field {key!r}").read(data, None, FIELDS)
    if "base_url_env" in data and not (
        isinstance(data["base_url_env"], str) and _ENV_NAME.fullmatch(data["base_url_env"])
    ):
        raise ValueError(
            f"{where}: field 'base_url_env' must name an environment variable (e.g. ANTIPERSIST_URL_MY_MODEL), "
            f"got {data['base_url_env']!r}"
        )
    _check_url(data["base_url"], f"{where}: field 'base_url'")
    if "price_per_mtok" in data:
        _check_prices(data["price_per_mtok"], where)
    try:  # the ranges (positive timeout, known system_prompt form...) are the Endpoint's own rules
        endpoint = Endpoint(
            base_url=data["base_url"], model=data["model"], **{k: data[k] for k in ENDPOINT_KEYS if k in data}
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    if "temperature" in data:
        endpoint.request_shape.check_temperature(float(data["temperature"]), f"{where}: field 'temperature'")


def _check_prices(prices: Any, where: str) -> None:
    """``price_per_mtok: {input: USD, output: USD}`` per million tokens, both non-negative numbers."""
    if not isinstance(prices, dict) or set(prices) != {"input", "output"}:
        raise ValueError(
            f"{where}: field 'price_per_mtok' must be a mapping {{input: USD, output: USD}} (per million tokens), "
            f"got {prices!r}"
        )
    prices_fields = Fields(*(Field(key, NUMBER, minimum=0) for key in ("input", "output")))
    Checker(where, label="{key}").read(prices, "price_per_mtok", prices_fields)


def _check_url(url: str, source: str) -> None:
    parsed = urlparse(url)
    if parsed.username or parsed.password:
        raise ValueError(
            f"{source} carries credentials ({parsed.hostname}); give the plain URL and put the key in the "
            "environment variable named by the profile's api_key_env"
        )


def add_endpoint_arguments(parser: Any) -> None:
    """``--base-url URL --model NAME [--api-key-env VAR] [--context-length N]`` on an argparse parser: an
    ad-hoc chat endpoint used instead of a backbone profile (``endpoint_from_arguments`` checks them)."""
    parser.add_argument(
        "--base-url",
        dest="base_url",
        metavar="URL",
        help="an OpenAI-compatible chat endpoint, e.g. http://127.0.0.1:8000/v1, instead of a backbone profile "
        "(needs --model)",
    )
    parser.add_argument("--model", metavar="NAME", help="with --base-url: the model name the endpoint serves")
    parser.add_argument(
        "--api-key-env",
        dest="api_key_env",
        metavar="VAR",
        help="with --base-url: the environment variable that holds the API key (default: none, no key is sent; "
        "only its name is recorded)",
    )
    parser.add_argument(
        "--context-length", dest="context_length", type=int, metavar="N", help="with --base-url: the context length"
    )
    parser.add_argument(
        "--request-shape",
        dest="request_shape",
        metavar="PRESET",
        help="with --base-url: how requests are shaped for that server (openai-compatible, vllm, llama-cpp, "
        "openai-reasoning, openai-chat, anthropic-openai; default openai-compatible)",
    )


def endpoint_from_arguments(args: Any, *, backbone: str | None = None) -> Endpoint | None:
    """The ad-hoc endpoint of ``add_endpoint_arguments``'s flags, or None without ``--base-url``. Refuses
    ``--base-url`` together with a backbone profile (``backbone``, e.g. ``--backbone``), and ``--model``,
    ``--api-key-env`` or ``--context-length`` without ``--base-url``."""
    base_url = getattr(args, "base_url", None)
    extras = [
        flag
        for flag, key in (
            ("--model", "model"),
            ("--api-key-env", "api_key_env"),
            ("--context-length", "context_length"),
            ("--request-shape", "request_shape"),
        )
        if getattr(args, key, None) is not None
    ]
    if base_url is None:
        if extras:
            raise ValueError(
                f"{' and '.join(extras)} describe an ad-hoc endpoint and need --base-url URL "
                "(or give a backbone profile with --backbone instead)"
            )
        return None
    if backbone:
        raise ValueError(
            f"give either --backbone ({backbone!r}: a profile name or file) or --base-url/--model (an ad-hoc "
            "endpoint), not both"
        )
    if not getattr(args, "model", None):
        raise ValueError("--base-url needs --model NAME: the model name the endpoint serves (listed by its /v1/models)")
    return adhoc_endpoint(
        base_url,
        args.model,
        api_key_env=args.api_key_env,
        context_length=args.context_length,
        request_shape=getattr(args, "request_shape", None),
    )


def load_profile(kind: str, name: str) -> dict[str, Any]:
    """Read and validate one profile, by name or by path (``is_profile_path``); errors name the file and the field."""
    path = profile_file(kind, name)
    if is_profile_path(name):
        if not path.is_file():
            raise ValueError(
                f"{kind[:-1]} profile file {path} does not exist (a value ending in .yaml/.yml or holding a "
                f"path separator is read as a file path, relative to {Path.cwd()}; a bare name is looked up "
                f"in {params_dir() / kind}: {available(kind)})"
            )
    elif name == EMBEDDED and kind == "embeddings":
        raise ValueError(
            f"embedding {EMBEDDED!r} is the in-process MiniLM embedder: it has no endpoint before the run starts it"
        )
    elif not path.exists():
        raise ValueError(
            f"unknown {kind[:-1]} profile {name!r}; available: {available(kind)} (in {params_dir() / kind}); "
            "or give a path to a profile file (ending in .yaml)"
        )
    data = read_mapping(path, PROFILE_KEYS)
    validate_profile(data, str(path))
    return data


def named_context_length(backbone: str, backbone_options: dict[str, Any] | None = None) -> tuple[int | None, str]:
    """The context length a study's backbone states before anything starts, and its model name: the embedded
    default's ``n_ctx`` (from ``backbone_options``), else the backbone profile's ``context_length`` (None when it
    states none). An unknown profile raises ``ValueError``. Every load-time context check of the kit asks here."""
    if backbone == EMBEDDED:
        from antipersist_lib.serving.embedded import EmbeddedBackbone

        server = EmbeddedBackbone.from_options(backbone_options or {}, log_path=None)
        return server.n_ctx, server.label
    data = load_profile("backbones", backbone)
    return data.get("context_length"), str(data.get("model", backbone))


def resolve_base_url(data: dict[str, Any], kind: str) -> tuple[str, str]:
    """(base URL, where it came from): the profile's own variable, else the global variable of
    ``kind``, else the profile's ``base_url``."""
    for var in (data.get("base_url_env"), GLOBAL_URL_ENV[kind]):
        if var and os.environ.get(var):
            url = os.environ[var]
            _check_url(url, f"${var}")
            return url, f"${var}"
    return data["base_url"], "base_url"


def endpoint_from_profile(data: dict[str, Any], kind: str = "backbones") -> Endpoint:
    url, _ = resolve_base_url(data, kind)
    return Endpoint(base_url=url, model=data["model"], **{k: data[k] for k in ENDPOINT_KEYS if k in data})


@dataclass(frozen=True)
class NamedEndpoint:
    """A profile resolved to its endpoint: the name runs are labelled with, and the profile's own
    base-URL variable (``base_url_env``) if it names one."""

    name: str
    endpoint: Endpoint
    url_env: str | None


def named_endpoint(entry: Any, kind: str, where: str) -> NamedEndpoint:
    """A profile name (``params/<kind>/NAME.yaml``), a profile file's path, or an inline mapping with the
    profile fields (a grid's ``backbones`` entries, a grid's or main-job profile's ``judge``); errors name
    ``where``."""
    if isinstance(entry, str):
        try:
            data = load_profile(kind, entry)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return NamedEndpoint(entry, endpoint_from_profile(data, kind), data.get("base_url_env"))
    if isinstance(entry, dict):
        unknown = sorted(set(entry) - PROFILE_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown endpoint field(s) {unknown}; allowed: {sorted(PROFILE_KEYS)}")
        for key in ("name", "model", "base_url"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise ValueError(f"{where}: an inline endpoint needs a non-empty {key!r}")
        decoding = sorted(set(entry) & set(DECODING_KEYS))
        if decoding:
            raise ValueError(
                f"{where}: {decoding} are read from backbone profile files only; "
                "for an inline endpoint set them under the grid's agent: mapping"
            )
        validate_profile(entry, where)
        return NamedEndpoint(entry["name"], endpoint_from_profile(entry, kind), entry.get("base_url_env"))
    raise ValueError(f"{where}: expected a profile name or a mapping, got {type(entry).__name__}")


def backbone_endpoint(name: str) -> Endpoint:
    return endpoint_from_profile(load_profile("backbones", name), "backbones")


def embedding_endpoint(name: str) -> Endpoint:
    return endpoint_from_profile(load_profile("embeddings", name), "embeddings")


def agent_decoding(backbone: str) -> dict[str, float]:
    """The agent's decoding settings in a backbone profile: ``{"temperature": t, "top_p": p}`` with
    only the keys the profile sets; ``{}`` when ``backbone`` has no profile file (the label of an
    explicit endpoint). A run's own ``agent:`` settings take precedence over these. ``backbone`` may be
    a profile file's path (``is_profile_path``)."""
    if not profile_file("backbones", backbone).is_file():
        return {}
    data = load_profile("backbones", backbone)
    return {k: float(data[k]) for k in DECODING_KEYS if k in data}
