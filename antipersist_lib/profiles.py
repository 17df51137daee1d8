"""Named backbone and embedding profiles (``params/backbones/*.yaml``, ``params/embeddings/*.yaml``).

A profile gives a base URL, a model name, a context length and the *name* of the environment
variable that holds the API key (never the key). ``ANTIPERSIST_PARAMS`` points at another params
folder; ``ANTIPERSIST_BASE_URL`` / ``ANTIPERSIST_EMBED_BASE_URL`` override the base URLs, e.g.
to point a whole grid at another vLLM host.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .llm import Endpoint

PROFILE_KEYS = {"name", "model", "base_url", "api_key_env", "context_length", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s", "system_prompt"}


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
    return Path(env) if env else Path(__file__).resolve().parents[1] / "params"


def available(kind: str) -> list[str]:
    d = params_dir() / kind
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def load_profile(kind: str, name: str) -> dict[str, Any]:
    """Read and validate one profile; errors name the file and the field."""
    path = params_dir() / kind / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"unknown {kind[:-1]} profile {name!r}; available: {available(kind)} (in {params_dir() / kind})")
    data = read_mapping(path, PROFILE_KEYS)
    for key in ("model", "base_url"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ValueError(f"{path}: field {key!r} must be a non-empty string")
    if "context_length" in data and not (isinstance(data["context_length"], int) and data["context_length"] > 0):
        raise ValueError(f"{path}: field 'context_length' must be a positive integer")
    return data


def endpoint_from_profile(data: dict[str, Any], *, override_env: str) -> Endpoint:
    kw = {k: data[k] for k in ("api_key_env", "context_length", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s", "system_prompt") if k in data}
    return Endpoint(base_url=os.environ.get(override_env) or data["base_url"], model=data["model"], **kw)


def backbone_endpoint(name: str) -> Endpoint:
    return endpoint_from_profile(load_profile("backbones", name), override_env="ANTIPERSIST_BASE_URL")


def embedding_endpoint(name: str) -> Endpoint:
    return endpoint_from_profile(load_profile("embeddings", name), override_env="ANTIPERSIST_EMBED_BASE_URL")
