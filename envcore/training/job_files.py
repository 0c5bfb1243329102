"""What travels with the from-scratch job, and what comes back from it.

The job runs on a machine that has PyTorch, transformers and a few common libraries but nothing of
this project's own stack and no package index; what it needs beyond that image travels with the
working tree, in one folder that git ignores (``build/gpu-job/``, at most 64 MiB with the tracked
files):

* ``wheels.tar.xz``: the Python 3.12 wheels of :data:`JOB_WHEELS`, at the versions installed here (the
  project's pins), for x86-64 Linux, downloaded into ``build/wheels-py312/`` and repacked uncompressed
  inside one xz archive (a third smaller than the wheels as downloaded: the tracked files travel too,
  and everything must fit 64 MiB);
* ``demos.jsonl.xz`` and ``demos-manifest.json``: the demonstrations, packed (xz);
* ``run.sh``: the one command the machine runs (install the wheels into its Python, then the job).

What comes back fits the rule of at most 8 files of at most 16 MiB: ``job.log``, the run's folder as
``results.tar.gz`` (split into ``results.tar.gz.00``, ``.01`` ... if it is larger than 15 MiB) and the
16-bit weights in shards of at most 15 MiB. :func:`import_results` puts them into ``artifacts/``
(the run folder, the model folder, and the metrics into the Trackio database the Space reads).
"""

from __future__ import annotations

import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from envcore.sandbox.app_runtime import distribution_name

PART_BYTES = 15 * 2**20
MAX_FILES_BACK = 8
MAX_CARRIED_BYTES = 64 * 2**20
RESULTS = "results.tar.gz"
DEMOS_PACK = "demos.jsonl.xz"

JOB_WHEELS = (
    # the environment and its wire types
    "openenv", "fastapi", "starlette", "pydantic", "pydantic_core", "annotated-types", "typing-inspection",
    "sniffio", "uvicorn", "python-multipart", "sse-starlette", "mcp", "fastmcp-slim", "httpx-sse", "httpx2",
    "httpcore2", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "opentelemetry-api",
    "py-key-value-aio", "beartype", "cachetools", "platformdirs", "truststore", "orjson", "exceptiongroup",
    "watchfiles", "python-dotenv", "brotli", "dill", "backports.tarfile", "importlib_metadata", "griffelib", "jsonref",
    "uncalled-for",
    # the libraries an app under repair may import (envcore.sandbox.app_runtime.APP_DISTRIBUTIONS)
    "SQLAlchemy", "greenlet", "sqlmodel", "PyJWT", "python-jose", "ecdsa", "rsa", "pyasn1", "passlib", "bcrypt",
    "pwdlib", "argon2-cffi", "argon2-cffi-bindings", "cffi", "pycparser", "cryptography", "pydantic-settings",
    "email-validator", "dnspython", "aiosqlite", "itsdangerous", "slowapi", "limits", "Deprecated", "Faker",
)
"""Distributions the job imports (it, its sandbox's zygote and the apps' libraries) that the GPU
machine's image lacks. ``tests/test_scratch_job.py`` checks the list against what the smoke job
actually imports."""

GPU_IMAGE = frozenset({
    "torch", "transformers", "tokenizers", "safetensors", "huggingface-hub", "hf-xet", "accelerate", "peft", "numpy",
    "pyyaml", "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "jinja2", "markupsafe", "filelock", "fsspec",
    "packaging", "regex", "tqdm", "typing-extensions", "requests", "urllib3", "charset-normalizer", "pygments",
    "rich", "markdown-it-py", "mdurl", "click", "attrs", "pillow", "psutil", "sympy", "mpmath", "networkx", "six",
    "setuptools", "pip", "wheel", "annotated-doc", "typer", "shellingham", "xxhash", "pandas", "pyarrow", "protobuf",
    "uvloop", "zipp", "triton", "python-dateutil", "pytz", "tzdata", "werkzeug", "wrapt", "yarl", "multidict",
    "aiohttp", "aiosignal", "frozenlist", "propcache", "aiohappyeyeballs", "aiofiles",
})
"""What the GPU machine's image provides (PyTorch and its companions, transformers, the common libraries):
the job carries nothing of these."""


# ----- demonstrations -------------------------------------------------------------------------------
def read_packed_demos(path: str | Path) -> list[Any]:
    """The demonstrations of a demos folder (``demos.jsonl`` or ``demos.jsonl.xz`` in it) or of one of
    those files."""
    from envcore.training.demos import Demonstration

    path = Path(path)
    if path.is_dir():
        packed = path / DEMOS_PACK
        path = packed if packed.is_file() else path / "demos.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no demonstrations at {path}: write them with python -m envcore demos")
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [Demonstration.model_validate_json(line) for line in handle if line.strip()]


def pack_demos(source: str | Path, folder: Path) -> dict[str, Any]:
    """``source``'s ``demos.jsonl`` as ``folder/demos.jsonl.xz`` (and its manifest beside it)."""
    source = Path(source)
    raw = (source / "demos.jsonl").read_bytes()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DEMOS_PACK).write_bytes(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
    manifest = json.loads((source / "manifest.json").read_text()) if (source / "manifest.json").is_file() else {}
    (folder / "demos-manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return {"raw_bytes": len(raw), "packed_bytes": (folder / DEMOS_PACK).stat().st_size,
            "demonstrations": manifest.get("demonstrations")}


# ----- wheels ---------------------------------------------------------------------------------------
def installed_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


WHEELS_PACK = "wheels.tar.xz"


def pack_wheels(wheels: list[Path], target: Path) -> Path:
    """``wheels`` as one xz tar at ``target``, each wheel rewritten with its files stored uncompressed
    (same files, same RECORD hashes), so that xz compresses the code itself rather than deflated bytes."""
    import tempfile
    import zipfile

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(Path(folder) / wheel.name, "w", zipfile.ZIP_STORED) as out:
                for item in source.infolist():
                    out.writestr(item, source.read(item.filename), compress_type=zipfile.ZIP_STORED)
        temporary = target.with_name(f".{target.name}.tmp")
        with tarfile.open(temporary, "w:xz", preset=9 | lzma.PRESET_EXTREME) as tar:
            for wheel in sorted(Path(folder).iterdir()):
                tar.add(wheel, arcname=wheel.name)
        os.replace(temporary, target)
    return target


def download_wheels(folder: Path, *, python: str = "3.12") -> list[Path]:
    """Python ``python`` wheels of :data:`JOB_WHEELS` (the versions installed here) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={installed_version(name)}" for name in JOB_WHEELS]
    platforms = [a for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                             "manylinux2014_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
                             "manylinux_2_24_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")
                 for a in ("--platform", p)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", *platforms, "-d", str(folder), *pins]
    subprocess.run(command, check=True)
    wanted = {distribution_name(name) for name in JOB_WHEELS}
    wheels = sorted(folder.glob("*.whl"))
    for wheel in wheels:  # an older download of another version would install twice
        name, version = wheel.name.split("-")[:2]
        if distribution_name(name) not in wanted or version != installed_version(name.replace("_", "-")):
            wheel.unlink()
    return sorted(folder.glob("*.whl"))


RUN_SCRIPT = """#!/usr/bin/env bash
# The from-scratch job on a GPU machine with no package index: install the carried wheels into its
# Python, then run the job into $OUT (written by `python -m envcore job prepare`).
set -euo pipefail
START=$(date +%s)
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/{root}"  # the repository's root, where python -m envcore runs
: "${{OUT:?set OUT to the folder the results go to}}"
PY="${{PYTHON:-python3}}"
BUDGET="${{BUDGET:-{budget}}}"  # seconds for this whole script, the install included
mkdir -p "$OUT"
# into the machine's own Python: the sandbox's workers read libraries from its installation folders
WHEELS=$(mktemp -d)
"$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
    "$HERE/{wheels}" "$WHEELS"
PIP_BREAK_SYSTEM_PACKAGES=1 "$PY" -m pip install --quiet --no-index --no-deps --no-cache-dir \
    --disable-pip-version-check "$WHEELS"/*.whl
rm -rf "$WHEELS"
export PYTHONUNBUFFERED=1 GRADIO_ANALYTICS_ENABLED=False
# the job's own clock starts once Python has imported it: leave 15 s for that
LEFT=$(( BUDGET - ($(date +%s) - START) - 15 ))
"$PY" -m envcore job run --demos "$HERE/{demos}" --out "$OUT" --budget "$LEFT" "$@" 2>&1 | tee "$OUT/job.log"
"""


def write_run_script(folder: Path, *, repo: Path, budget: int = 540) -> Path:
    """``folder/run.sh``; ``folder`` must lie inside ``repo`` (it travels with the working tree)."""
    folder, repo = folder.resolve(), repo.resolve()
    if not folder.is_relative_to(repo):
        raise ValueError(f"{folder} is outside the repository {repo}: it would not travel with the working tree")
    path = folder / "run.sh"
    path.write_text(RUN_SCRIPT.format(demos=DEMOS_PACK, wheels=WHEELS_PACK, budget=budget,
                                      root=os.path.relpath(repo, folder)))
    path.chmod(0o755)
    return path


def tracked_bytes(repo: Path) -> int:
    """Bytes of the files git tracks in ``repo`` (they travel with every call)."""
    names = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], check=True, capture_output=True).stdout
    total = 0
    for name in names.decode().split("\0"):
        if name:
            try:
                total += (repo / name).stat().st_size
            except OSError:
                continue
    return total


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# ----- results --------------------------------------------------------------------------------------
def export_results(work: Path, name: str, out: Path) -> list[Path]:
    """The run folder and the model folder (weights aside) as ``results.tar.gz`` (in parts if large),
    and the weights' shards beside it, in ``out``; returns the files written. Files of an earlier
    export are replaced (each written under a temporary name first, so a job killed mid-export
    leaves the earlier files whole)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for folder in (work / "training" / name, work / "models" / name):
            if folder.is_dir():
                for path in sorted(folder.rglob("*")):
                    if path.is_file() and not path.name.endswith(".safetensors"):
                        tar.add(path, arcname=str(path.relative_to(work)))
    data = buffer.getvalue()
    parts = [data[i:i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]
    names = [RESULTS] if len(parts) == 1 else [f"{RESULTS}.{i:02d}" for i in range(len(parts))]
    weights = sorted((work / "models" / name).glob("*.safetensors")) if (work / "models" / name).is_dir() else []
    if len(names) + len(weights) + 1 > MAX_FILES_BACK:
        raise RuntimeError(f"{len(names)} result parts and {len(weights)} weight shards are more than the "
                           f"{MAX_FILES_BACK - 1} files that can come back beside job.log")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for part_name, part in zip(names, parts):
        written.append(_replace(out / part_name, part))
    for shard in weights:
        if shard.stat().st_size > PART_BYTES + 2**20:
            raise RuntimeError(f"{shard.name} is {shard.stat().st_size} bytes, over a file's limit")
        written.append(_replace(out / shard.name, shard.read_bytes()))
    keep = {p.name for p in written} | {"job.log", "work"}
    for stale in out.iterdir():
        if stale.name not in keep and stale.is_file() and (stale.name.startswith(RESULTS) or stale.name.endswith(".safetensors")):
            stale.unlink()
    return written


def _replace(path: Path, data: bytes) -> Path:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
    return path


def import_results(source: Path, artifacts: Path, *, overwrite: bool = False) -> dict[str, Any]:
    """Put a job's results (``source``: the folder its files came back to) into ``artifacts``: the run
    folder under ``training/``, the model (with its shards) under ``models/``, and its metrics into
    ``trackio/a01-repair-gym.db``. Returns what was imported."""
    parts = sorted(source.glob(f"{RESULTS}.[0-9][0-9]")) or [source / RESULTS]
    if not parts[0].is_file():
        raise FileNotFoundError(f"no {RESULTS} in {source}: is it the folder a job's results came back to?")
    data = b"".join(p.read_bytes() for p in parts)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        names = {Path(m.name).parts[1] for m in members if m.name.startswith("training/") and len(Path(m.name).parts) > 2}
        if len(names) != 1:
            raise ValueError(f"the results hold {len(names)} runs ({sorted(names)}); expected one")
        name = names.pop()
        for top in ("training", "models"):
            target = artifacts / top / name
            if target.exists():
                if not overwrite:
                    raise FileExistsError(f"{target} exists; pass --overwrite to replace it")
                shutil.rmtree(target)
        tar.extractall(artifacts, filter="data")
    model = artifacts / "models" / name
    for shard in sorted(source.glob("*.safetensors")):
        shutil.copyfile(shard, model / shard.name)
    index = model / "model.safetensors.index.json"
    if index.is_file():
        missing = sorted(set(json.loads(index.read_text())["weight_map"].values()) - {p.name for p in model.iterdir()})
        if missing:
            raise FileNotFoundError(f"weight shards missing from {source}: {', '.join(missing)}")
    elif not (model / "model.safetensors").is_file():
        raise FileNotFoundError(f"no weights for {name} in {source}")
    run_dir = artifacts / "training" / name
    metrics = write_trackio(run_dir / "metrics.jsonl", artifacts / "trackio")
    return {"run": name, "run_dir": str(run_dir), "model_dir": str(model), "metric_rows": metrics}


def write_trackio(metrics: Path, folder: Path, *, project: str = "a01-repair-gym") -> int:
    """The job's metric rows (``metrics.jsonl``: run, step, metrics) into Trackio's database in ``folder``,
    each run replacing an earlier run of its name. Runs in a fresh process (Trackio reads its folder
    once, when first imported)."""
    if not metrics.is_file():
        return 0
    code = (
        "import json, sys\n"
        "from envcore.training.pipeline import forget_run, use_tracking_dir\n"
        "use_tracking_dir(sys.argv[2])\n"
        "import trackio\n"
        "rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]\n"
        "for run in dict.fromkeys(r['run'] for r in rows):\n"
        "    forget_run(sys.argv[3], run)\n"
        "    trackio.init(project=sys.argv[3], name=run, space_id=None)\n"
        "    for r in rows:\n"
        "        if r['run'] == run:\n"
        "            trackio.log(r['metrics'], step=r['step'])\n"
        "    trackio.finish()\n"
        "print(len(rows))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(metrics), str(folder), project], check=True,
                            capture_output=True, text=True, env=os.environ | {"GRADIO_ANALYTICS_ENABLED": "False"})
    return int(result.stdout.strip().splitlines()[-1])
