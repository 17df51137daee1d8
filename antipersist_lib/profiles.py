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
    for key in ("timeout_s", "backoff_base_s", "backoff_max_s"):
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], (int, float))):
            raise ValueError(f"{path}: field {key!r} must be a number, got {data[key]!r}")
    if "max_retries" in data and (isinstance(data["max_retries"], bool) or not isinstance(data["max_retries"], int)):
        raise ValueError(f"{path}: field 'max_retries' must be an integer, got {data['max_retries']!r}")
    for key in ("name", "api_key_env", "system_prompt"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{path}: field {key!r} must be a string, got {data[key]!r}")
    try:  # the ranges (positive timeout, known system_prompt form...) are the Endpoint's own rules
        endpoint_from_profile(data, override_env="")
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    return data


def endpoint_from_profile(data: dict[str, Any], *, override_env: str) -> Endpoint:
    kw = {k: data[k] for k in ("api_key_env", "context_length", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s", "system_prompt") if k in data}
    return Endpoint(base_url=os.environ.get(override_env) or data["base_url"], model=data["model"], **kw)


def backbone_endpoint(name: str) -> Endpoint:
    return endpoint_from_profile(load_profile("backbones", name), override_env="ANTIPERSIST_BASE_URL")


def embedding_endpoint(name: str) -> Endpoint:
    return endpoint_from_profile(load_profile("embeddings", name), override_env="ANTIPERSIST_EMBED_BASE_URL")
