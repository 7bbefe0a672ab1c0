"""Time in questions and memories, read from the words (English and Portuguese).

`recency_policy(question)` picks how much a statement's age counts: a question about the present
("where do I live now?") wants the newest statement, one about the past ("when did I…", "last
year", "before I moved") has no reason to prefer new text. `asks_when(question)` tells a question
whose answer is a date or time; `states_time(text)` tells a memory that carries one (an absolute
date, a month, a weekday, a clock time, or a relative one such as "yesterday" or "last week").
Pure regular expressions over lowercased text; no dates are computed here.
"""

from __future__ import annotations

import re

__all__ = ["asks_when", "recency_policy", "states_time"]

_MONTHS_EN = (
    # "may" and "mar" (Portuguese "sea") are left out as words of their own: too often not a month.
    "january|february|march|april|june|july|august|september|october|november|december|"
    r"jan|feb|apr|jun|jul|aug|sep|sept|oct|nov|dec|may \d"  # and "3 may": `_DIGITS`
)
_MONTHS_PT = (
    "janeiro|fevereiro|março|marco|abril|maio|junho|julho|agosto|setembro|outubro|novembro|dezembro"
)
_WEEKDAYS = (
    "monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|"
    "segunda|terça|terca|quarta|quinta|sexta|sábado|sabado|domingo|fim de semana"
)
_COUNT = (
    r"\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|a couple of|several|"
    r"um|uma|dois|duas|três|tres|quatro|cinco|seis|sete|oito|nove|dez|alguns|algumas|poucos|poucas"
)
_SPANS = r"days?|weeks?|months?|years?|dias?|semanas?|m[eê]s|meses|anos?"
_RELATIVE = (
    r"yesterday|today|tonight|tomorrow|ago|last (?:week|month|year|night|weekend|summer|winter|"
    r"spring|fall|time)|next (?:week|month|year|weekend)|this (?:week|month|year|weekend|morning)|"
    r"recently|the other day|since|ontem|hoje|amanhã|amanha|semana passada|mês passado|"
    r"mes passado|ano passado|próxima semana|proxima semana|há \d+|desde|"
    # A span from now: "in two weeks", "in a few days", "daqui a duas semanas", "em 3 meses".
    + "|".join(
        f"{word} (?:{_COUNT}) (?:{_SPANS})"
        for word in ("in", "within", "daqui a", "dentro de", "em")
    )
)
# A date (2026-12-18), a year (19xx, 20xx), a clock time (6:30, 10 am, 7pm), a day of May
# ("3 may"): those led by any digit under one `\d`, as `_by_first_letter` groups the words.
_DIGITS = r"\d(?:\d{3}-\d{2}-\d{2}|\d?:\d{2}|\d? ?(?:am|pm)|\d* may)|19\d{2}|20\d{2}"


def _by_first_letter(alternation: str) -> str:
    """`alternation` (alternatives separated by `|` outside any group; no `|` or parenthesis in
    a character class) with the alternatives that start with the same letter grouped under it:
    "jan|june|july" as "j(?:an|une|uly)". The same language, so the same matches. `re` tries a
    branch's alternatives one after another at every position it searches: ~80 at each word
    boundary of every saved text (its index document asks) cost ~11 µs a save; grouped, a
    position tries ~20 first letters, and then only that letter's few (~4 µs)."""
    alternatives, depth, start = [], 0, 0
    for at, char in enumerate(alternation):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            alternatives.append(alternation[start:at])
            start = at + 1
    alternatives.append(alternation[start:])
    groups: dict[str, list[str]] = {}
    rest = []
    for alternative in alternatives:
        if alternative[:1].isalpha() and alternative[1:2] not in ("?", "*", "+", "{"):
            groups.setdefault(alternative[0], []).append(alternative[1:])
        else:
            rest.append(alternative)
    return "|".join([*rest, *(f"{head}(?:{'|'.join(tails)})" for head, tails in groups.items())])


_TIME = re.compile(
    rf"\b(?:{_DIGITS}|"
    + _by_first_letter(f"{_MONTHS_EN}|{_MONTHS_PT}|{_WEEKDAYS}|{_RELATIVE}")
    + r")\b"
)
_WHEN = re.compile(
    r"\b(?:when|what (?:date|day|time|year|month)|which (?:date|day|year|month)|how long ago|"
    r"how long (?:has|have|did)|quando|que dia|qual dia|que horas|em que (?:data|dia|ano|mês|mes)|"
    r"há quanto tempo)\b"
)
_CURRENT = re.compile(
    r"\b(?:now|currently|current|these days|nowadays|at the moment|right now|anymore|still|"
    r"am i \w+ing|are you \w+ing|agora|atualmente|atual|hoje em dia|no momento|ainda|"
    r"estou \w+ndo|tô \w+ndo)\b"
)
_PAST = re.compile(
    r"\b(?:when did|did (?:i|you|he|she|they|we)|ago|last (?:week|month|year|weekend|summer|"
    r"winter|spring|fall|time)|yesterday|before|used to|back then|originally|first time|"
    r"in (?:19|20)\d{2}|quando (?:eu )?(?:me |nos |se )?(?:fui|fiz|foi|comecei|mudei|conheci|"
    r"casei|comprei|terminei|nasci|viajei|visitei)|ontem|"
    r"ano passado|mês passado|mes passado|semana passada|antes|há \d+)\b"
)


def recency_policy(question: str) -> str:
    """`current`, `past` or `default` (the names of `search.scoring.Recency`)."""
    text = question.lower()
    if _CURRENT.search(text):
        return "current"
    if _PAST.search(text):
        return "past"
    return "default"


def asks_when(question: str) -> bool:
    """The answer is a date or a time ("when…", "what day…", "quando…")."""
    return _WHEN.search(question.lower()) is not None


def states_time(text: str) -> bool:
    """The text carries a date or a time, absolute or relative."""
    return _TIME.search(text.lower()) is not None
