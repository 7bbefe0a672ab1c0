"""In-RAM lexical index: BM25 (Okapi) postings over content terms, updated incrementally.

It knows documents only as ids and term lists; ranking policy lives in `scoring`. Only live memories
are indexed. `add`/`remove` are O(terms of the document); nothing is ever rebuilt on a save.
"""

from __future__ import annotations

import math
from collections import Counter

__all__ = ["BM25_B", "BM25_K1", "LexicalIndex"]

BM25_K1 = 1.2
BM25_B = 0.75


class LexicalIndex:
    def __init__(self) -> None:
        self._postings: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}
        self._doc_terms: dict[str, tuple[str, ...]] = {}  # distinct terms, so remove() is local
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._lengths

    def add(self, doc_id: str, terms: list[str]) -> None:
        """Index `doc_id` with `terms`, replacing any earlier version of it."""
        if doc_id in self._lengths:
            self.remove(doc_id)
        counts = Counter(terms)
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[doc_id] = tf
        self._doc_terms[doc_id] = tuple(counts)
        self._lengths[doc_id] = len(terms)
        self._total_length += len(terms)

    def remove(self, doc_id: str) -> None:
        length = self._lengths.pop(doc_id, None)
        if length is None:
            return
        self._total_length -= length
        for term in self._doc_terms.pop(doc_id):
            docs = self._postings[term]
            del docs[doc_id]
            if not docs:
                del self._postings[term]

    def document_frequency(self, term: str) -> int:
        return len(self._postings.get(term, ()))

    def score_document(self, query_terms: list[str], doc_terms: list[str]) -> float:
        """BM25 of a document that is not indexed (a retired record in a history view), against
        the live corpus statistics."""
        n_docs = max(len(self._lengths), 1)
        avgdl = max(self._total_length / n_docs, 1.0)
        counts = Counter(doc_terms)
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len(doc_terms) / avgdl)
        score = 0.0
        for term in query_terms:
            tf = counts.get(term)
            if tf:
                df = self.document_frequency(term)
                idf = math.log((n_docs - df + 0.5) / (df + 0.5) + 1.0)
                score += idf * tf * (BM25_K1 + 1.0) / (tf + norm)
        return score

    def scores(self, query_terms: list[str], allowed: set[str] | None = None) -> dict[str, float]:
        """BM25 score of every document matching at least one query term (repeated query terms
        count again), restricted to `allowed` ids when given."""
        n_docs = len(self._lengths)
        if not n_docs:
            return {}
        avgdl = max(self._total_length / n_docs, 1.0)
        out: dict[str, float] = {}
        for term in query_terms:
            docs = self._postings.get(term)
            if not docs:
                continue
            df = len(docs)
            idf = math.log((n_docs - df + 0.5) / (df + 0.5) + 1.0)
            for doc_id, tf in docs.items():
                if allowed is not None and doc_id not in allowed:
                    continue
                norm = BM25_K1 * (1.0 - BM25_B + BM25_B * self._lengths[doc_id] / avgdl)
                out[doc_id] = out.get(doc_id, 0.0) + idf * tf * (BM25_K1 + 1.0) / (tf + norm)
        return out
