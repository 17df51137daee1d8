"""The declarative profile checks (``antipersist_lib.profile_fields``, issue 46): one spec per block, every error
naming the file, the key and what is allowed; and the consolidation study profile read through them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from antipersist_lib.profile_fields import (
    BOOL,
    CHOICE,
    INT,
    MAPPING,
    NAMES,
    NUMBER,
    STR,
    TEXT,
    Checker,
    Field,
    Fields,
    ProfileError,
)

ROOT = Path(__file__).resolve().parents[1]

BLOCK = Fields(
    Field("size", INT, minimum=1, required=True),
    Field("seed", INT, minimum=0, default=0),
    Field("mode", CHOICE, choices=("fast", "slow"), default="fast"),
    Field("cap", INT, minimum=1, nullable=True),
    Field("shuffle", BOOL, default=False),
    Field("types", NAMES),
    Field("label", STR, default="run"),
    Field("rate", NUMBER, minimum=0, maximum=2, default=1.0),
    Field("extra", MAPPING, keys=("a", "b")),
)


def read(value, key="block"):
    return Checker("profiles/x.yaml").read(value, key, BLOCK)


def error(value, key="block") -> str:
    with pytest.raises(ProfileError) as info:
        read(value, key)
    return str(info.value)


def test_defaults_are_filled_in_and_given_keys_are_known():
    values = read({"size": 3})
    assert values == {
        "size": 3,
        "seed": 0,
        "mode": "fast",
        "cap": None,
        "shuffle": False,
        "types": None,
        "label": "run",
        "rate": 1.0,
        "extra": {},
    }
    assert values.given == {"size"}
    full = read(
        {"size": 1, "seed": 7, "mode": "slow", "cap": None, "shuffle": True, "types": "put", "rate": 2, "extra": None}
    )
    assert (full["seed"], full["mode"], full["cap"], full["shuffle"]) == (7, "slow", None, True)
    assert full["types"] == ["put"] and full["rate"] == 2 and full["extra"] == {}  # a name alone, null as {}
    assert full.given == {"size", "seed", "mode", "cap", "shuffle", "types", "rate", "extra"}
    # a mapping's default is a fresh dict each time: changing one read's value leaves the next one alone
    read({"size": 1})["extra"]["a"] = 1
    assert read({"size": 1})["extra"] == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"size": "3"}, "'block.size' must be an integer >= 1, got '3'"),
        ({"size": True}, "'block.size' must be an integer >= 1, got True"),  # a bool is no integer
        ({"size": 0}, "'block.size' must be an integer >= 1, got 0"),
        ({"size": None}, "'block.size' must be an integer >= 1, got None"),  # null is checked like any value
        ({"size": 1, "seed": -1}, "'block.seed' must be an integer >= 0, got -1"),
        ({"size": 1, "cap": 0}, "'block.cap' must be an integer >= 1 or null, got 0"),
        ({"size": 1, "mode": "medium"}, "'block.mode' must be one of ('fast', 'slow'), got 'medium'"),
        ({"size": 1, "mode": ["fast"]}, "'block.mode' must be one of ('fast', 'slow'), got ['fast']"),
        ({"size": 1, "shuffle": "yes"}, "'block.shuffle' must be true or false, got 'yes'"),
        ({"size": 1, "types": []}, "'block.types' must be a non-empty list of names, got []"),
        ({"size": 1, "types": ["a", "a"]}, "'block.types' lists a name twice: ['a', 'a']"),
        ({"size": 1, "label": ""}, "'block.label' must be a non-empty string, got ''"),
        ({"size": 1, "rate": 2.5}, "'block.rate' must be a number in [0, 2], got 2.5"),
        ({"size": 1, "rate": False}, "'block.rate' must be a number in [0, 2], got False"),
        ({"size": 1, "extra": {"c": 1}}, "unknown key(s) ['block.extra.c']; allowed in 'block.extra': ['a', 'b']"),
        ({"size": 1, "extra": 3}, "'block.extra' must be a mapping with keys from ['a', 'b'], got 3"),
        ({"size": 1, "sise": 1}, "unknown key(s) ['block.sise']; allowed in 'block': ['cap', 'extra', 'label', "),
        ({}, "'block.size' must be an integer >= 1; it is missing"),
        (None, "'block.size' must be an integer >= 1; it is missing"),  # a null block reads as {}
        ([1], "'block' must be a mapping with keys from ['cap', 'extra', 'label', 'mode', 'rate', 'seed', 'shuffle', "),
    ],
)
def test_each_wrong_value_names_the_file_the_key_and_what_is_allowed(value, message):
    text = error(value)
    assert text.startswith("profiles/x.yaml: ")
    assert message in text


def test_the_top_level_names_keys_without_a_block_prefix():
    assert read({"size": 2}, key=None)["size"] == 2
    assert error({"size": 2, "oops": 1}, key=None) == (
        "profiles/x.yaml: unknown key(s) ['oops']; allowed: "
        "['cap', 'extra', 'label', 'mode', 'rate', 'seed', 'shuffle', 'size', 'types']"
    )
    assert error({"seed": 1}, key=None) == "profiles/x.yaml: 'size' must be an integer >= 1; it is missing"
    assert error(["size"], key=None) == "profiles/x.yaml: must hold a mapping of settings"


def test_a_loader_keeps_its_own_error_class_and_prefix():
    class LoaderError(ValueError):
        pass

    check = Checker("p.yaml", lambda message: LoaderError(f"my profile p.yaml: {message}"))
    with pytest.raises(LoaderError, match=re.escape("my profile p.yaml: 'n' must be an integer >= 2 or null, got 1")):
        check.integer(1, "n", minimum=2, optional=True)
    assert check.integer(None, "n", optional=True) is None and check.integer(3, "n", minimum=2) == 3
    assert check.boolean(False, "b") is False and check.choice("a", "c", ["a"]) == "a"
    assert check.names("x", "k") == ["x"] and check.mapping(None, "m", {"a"}) == {}
    with pytest.raises(LoaderError, match="'c' must be one of"):
        check.choice(None, "c", ["a"])


def test_a_spec_is_checked_when_it_is_written():
    with pytest.raises(ValueError, match="kind must be one of"):
        Field("x", "integer")
    with pytest.raises(ValueError, match="a choice needs choices"):
        Field("x", CHOICE)
    with pytest.raises(ValueError, match="a required field has no default"):
        Field("x", INT, required=True, default=1)
    with pytest.raises(ValueError, match="states a key twice"):
        Fields(Field("x"), Field("x"))
    assert Field("x", INT, minimum=2, nullable=True).describe() == "an integer >= 2 or null"
    assert Field("x", INT).describe() == "an integer" and Field("x", TEXT).describe() == "a string"
    assert Field("x", STR, what="a path to a pool .jsonl").describe() == "a path to a pool .jsonl"
    assert Field("x", STR, nullable=True, what="a set's name").describe() == "a set's name or null"


# -- the consolidation study profile, read through the specs ------------------------------------------------------


def _write(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load((ROOT / "params" / "consolidation" / "smoke.yaml").read_text(encoding="utf-8"))
    for key, value in changes.items():  # None: the key is left out
        data.pop(key) if value is None else data.__setitem__(key, value)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"context": {"overflow": "drop"}},
            "'context.overflow' must be one of ('refuse', 'truncate_oldest'), got 'drop'",
        ),
        ({"build_seed": "7"}, "'build_seed' must be an integer >= 0, got '7'"),
        ({"response_cache": "no"}, "'response_cache' must be true or false, got 'no'"),
        ({"evaluation": {"max_steps": 0}}, "'evaluation.max_steps' must be an integer >= 1, got 0"),
        ({"evaluation": {"heldout_limit": None, "no_memory": 1}}, "'evaluation.no_memory' must be true or false"),
        ({"pool": {"expert": {"seed": 1}}}, "'pool.expert.per_type' must be an integer >= 1; it is missing"),
        ({"pool": {"expert": {"per_type": 2, "split": 3}}}, "'pool.expert.split' must be a non-empty string, got 3"),
        ({"pool": {"file": ""}}, "'pool.file' must be a path to a pool .jsonl, got ''"),
        ({"pool": {"expert": 4}}, "'pool.expert' must be a mapping with keys from ['allow_fewer', 'per_type', "),
        ({"evaluation": {"heldout_set": 3}}, "'evaluation.heldout_set' must be a held-out set's name or null, got 3"),
        (
            {"regimes": {"static_all": {"backbone": "embedded"}}},
            "'regimes.static_all.backbone' must be a backbone profile name in params/backbones/ or a profile file",
        ),
        (
            {"surgery": {"regime": "stream", "bulider": "dc"}},
            "unknown key(s) ['surgery.bulider']; allowed in 'surgery'",
        ),
    ],
)
def test_the_study_profile_names_file_key_and_allowed_values(tmp_path, change, message):
    from antipersist_lib.consolidation.profile import load_study_profile
    from antipersist_lib.studies import StudyProfileError

    path = _write(tmp_path, **change)
    with pytest.raises(StudyProfileError) as info:
        load_study_profile(path, context_check=False)
    assert str(info.value).startswith(f"study profile {path}: ")
    assert message in str(info.value)


def test_the_study_profile_fills_in_its_defaults(tmp_path):
    from antipersist_lib.consolidation.context import ContextSpec
    from antipersist_lib.consolidation.profile import load_study_profile

    data = yaml.safe_load((ROOT / "params" / "consolidation" / "smoke.yaml").read_text(encoding="utf-8"))
    evaluation = {k: v for k, v in data["evaluation"].items() if k in ("heldout_limit", "agent")}
    path = _write(tmp_path, evaluation=evaluation, build_seed=None, response_cache=None)
    assert not {"build_seed", "response_cache", "context"} & set(yaml.safe_load(path.read_text(encoding="utf-8")))
    profile = load_study_profile(path, context_check=False)
    assert profile.seeds == (42, 43) and profile.max_steps == 50 and profile.steps == "last"
    assert profile.heldout_concurrency == 1 and profile.no_memory is True and profile.task_types is None
    assert profile.build_seed == 0 and profile.response_cache is True and profile.context == ContextSpec()


def test_a_rule_beyond_the_kind_and_the_key_label():
    spec = Fields(
        Field("top_p", NUMBER, maximum=1, test=lambda v: v > 0, what="a number in (0, 1]"),
        Field("note", TEXT),
        Field("n", INT),
    )
    check = Checker("b.yaml", label="field {key!r}")
    assert check.read({"top_p": 1, "note": "", "n": -5}, None, spec) == {"top_p": 1, "note": "", "n": -5}
    for value, message in (
        ({"top_p": 0}, "b.yaml: field 'top_p' must be a number in (0, 1], got 0"),
        ({"top_p": 1.5}, "b.yaml: field 'top_p' must be a number in (0, 1], got 1.5"),
        ({"note": 3}, "b.yaml: field 'note' must be a string, got 3"),
        ({"n": 1.0}, "b.yaml: field 'n' must be an integer, got 1.0"),
    ):
        with pytest.raises(ProfileError) as info:
            check.read(value, None, spec)
        assert str(info.value) == message


# -- the backbone and embedding profiles (serving.profiles), read through the specs -------------------------------


def test_the_endpoint_profile_spec_covers_every_profile_key():
    from antipersist_lib.serving.profiles import FIELDS, PROFILE_KEYS

    assert FIELDS.keys == PROFILE_KEYS


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": None}, "p.yaml: field 'model' must be a non-empty string; it is missing"),
        ({"context_length": True}, "p.yaml: field 'context_length' must be a positive integer, got True"),
        ({"timeout_s": "10"}, "p.yaml: field 'timeout_s' must be a number, got '10'"),
        ({"max_retries": 1.5}, "p.yaml: field 'max_retries' must be an integer, got 1.5"),
        ({"system_prompt": 1}, "p.yaml: field 'system_prompt' must be a string, got 1"),
        ({"top_p": 0}, "p.yaml: field 'top_p' must be a number in (0, 1], got 0"),
        ({"price_per_mtok": {"input": 1, "output": -2}}, "p.yaml: price_per_mtok.output must be a number >= 0, got -2"),
        ({"temprature": 1}, "p.yaml: unknown key(s) ['temprature']; allowed: ['api_key_env', 'backoff_base_s', "),
    ],
)
def test_an_endpoint_profile_names_the_field(fields, message):
    from antipersist_lib.serving.profiles import validate_profile

    data = {"model": "m", "base_url": "http://127.0.0.1:8000/v1", **fields}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(ValueError) as info:
        validate_profile(data, "p.yaml")
    assert str(info.value).startswith(message)


def test_names_with_choices_name_every_unknown_one_and_what_is_allowed():
    spec = Fields(Field("methods", NAMES, choices=("react", "reflexion")))
    check = Checker("grid.yaml", label="{key}")
    assert check.read({"methods": ["reflexion", "react"]}, None, spec)["methods"] == ["reflexion", "react"]
    assert check.read({"methods": "react"}, None, spec)["methods"] == ["react"]
    with pytest.raises(
        ProfileError, match=r"^grid\.yaml: methods: unknown 'reakt', 'x'; expected names from \('react', 'reflexion'\)$"
    ):
        check.read({"methods": ["react", "reakt", "x"]}, None, spec)
    with pytest.raises(ProfileError, match=r"methods lists a name twice"):
        check.read({"methods": ["react", "react"]}, None, spec)


@pytest.mark.parametrize("loader", ["main", "grid"])
def test_the_main_profile_and_the_grid_state_the_protocol_settings_once(loader):
    """Both loaders (and RunSpec itself) check the protocol settings with runner.spec.PROTOCOL, and a key they
    accept is one RunSpec has."""
    import dataclasses

    from antipersist_lib.runner import grid, main_profile
    from antipersist_lib.runner.spec import PROTOCOL, RunSpec

    spec = main_profile.PROFILE if loader == "main" else grid.GRID
    run_fields = {f.name for f in dataclasses.fields(RunSpec)}
    for f in PROTOCOL.fields:
        assert f.key in spec.keys and f.key in run_fields
        mine = spec[f.key]
        assert (mine.kind, mine.minimum, mine.nullable, mine.choices) == (f.kind, f.minimum, f.nullable, f.choices)
    with pytest.raises(ValueError, match=r"^train_per_iteration must be an integer >= 0, got -1$"):
        RunSpec(method="react", benchmark="alfworld", backbone="x", train_per_iteration=-1)
