"""Time in questions and memories, read from the words (English and Portuguese).

`recency_policy(question)` picks how much a statement's age counts: a question about the present
("where do I live now?") wants the newest statement, one about the past ("when did I…", "last
year", "before I moved") has no reason to prefer new text. `asks_when(question)` tells a question
whose answer is a date or time; `states_time(text)` tells a memory that carries one (an absolute
date, a month, a weekday, a clock time, or a relative one such as "yesterday" or "last week").
The one place dates are computed: `named_span(question, now_ms)`, the stretch of time a question
names ("in January 2022", "on 1 May, 2022", "between August 11 and August 15 2023", "em março",
"last month"), and `told_span(text, stated_ms)`, the one a memory's own words point to from when
it was said ("last week", "see you tomorrow"), for ranking to favour what was said then (UTC
calendar days). Elsewhere, pure regular expressions over lowercased text.
"""

from __future__ import annotations

import re
from calendar import monthrange
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache

__all__ = [
    "asks_when",
    "compile_patterns",
    "named_span",
    "recency_policy",
    "states_time",
    "told_span",
]


class _Pattern:
    """A regular expression compiled at its first search, not at import: `re` parses in Python,
    and these took ~15 ms to compile, paid by every one-shot CLI call that imports the ranking
    (a `memory::get`, a save), most of which read no question's time. Once compiled, `search`
    and `finditer` are the compiled pattern's own: no call of ours in between."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._compiled: re.Pattern[str] | None = None
        self.search: Callable[[str], re.Match[str] | None] = self._first_search
        self.finditer: Callable[[str], Iterator[re.Match[str]]] = self._first_finditer
        _PATTERNS.append(self)

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:  # two threads at once compile it twice: the same pattern
            self._compiled = re.compile(self._source)
            self.search, self.finditer = self._compiled.search, self._compiled.finditer
        return self._compiled

    def _first_search(self, text: str) -> re.Match[str] | None:
        return self.compiled().search(text)

    def _first_finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.compiled().finditer(text)


_PATTERNS: list[_Pattern] = []


def compile_patterns() -> None:
    """Compile every pattern now: a server does at its start, so that its first recall does not."""
    for pattern in _PATTERNS:
        pattern.compiled()


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
_SO_FAR = "(?:now|already|j[aá])"


def _each_then(words: Sequence[str], tail: str) -> str:
    """`words`, each followed by `tail`, as alternatives: one per first letter
    ("two|ten" → "t(?:wo|en)" + tail), so that `_by_first_letter` files each under its letter,
    and `tail` is written (and parsed by `re`) once a letter, not once a word. The same
    language as `"|".join(word + tail for word in words)`."""
    heads: dict[str, list[str]] = {}
    for word in words:
        heads.setdefault(word[0], []).append(word[1:])
    return "|".join(f"{head}(?:{'|'.join(rests)}){tail}" for head, rests in heads.items())


_RELATIVE_WORDS = (
    r"yesterday|today|tonight|tomorrow|ago|last (?:week|month|year|night|weekend|summer|winter|"
    r"spring|fall|time)|next (?:week|month|year|weekend)|this (?:week|month|year|weekend|morning)|"
    r"recently|the other day|since|ontem|hoje|amanhã|amanha|semana passada|mês passado|"
    r"mes passado|ano passado|próxima semana|proxima semana|há \d+|desde"
)
# A span from now: "in two weeks", "in a few days", "daqui a duas semanas", "em 3 meses".
_FROM_NOW = ("in", "within", "daqui a", "dentro de", "em", "for", "por", "h[aá]")
_RELATIVE = (
    f"{_RELATIVE_WORDS}|"
    + _each_then(_FROM_NOW, f" (?:{_COUNT}) (?:{_SPANS})")
    # A duration so far, the answer to "how long…": "seven years now", "2 meses já".
    + "|"
    + _each_then([c for c in _COUNT.split("|") if c != r"\d+"], f" (?:{_SPANS}) {_SO_FAR}")
)
# A date (2026-12-18), a year (19xx, 20xx), a clock time (6:30, 10 am, 7pm), a day of May
# ("3 may"), a duration so far ("3 years now"): those led by any digit under one `\d`, as
# `_by_first_letter` groups the words.
_DIGITS = (
    rf"\d(?:\d{{3}}-\d{{2}}-\d{{2}}|\d?:\d{{2}}|\d? ?(?:am|pm)|\d* may|\d* (?:{_SPANS}) {_SO_FAR})|"
    r"19\d{2}|20\d{2}"
)


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


_TIME = _Pattern(
    rf"\b(?:{_DIGITS}|"
    + _by_first_letter(f"{_MONTHS_EN}|{_MONTHS_PT}|{_WEEKDAYS}|{_RELATIVE}")
    + r")\b"
)
_WHEN = _Pattern(
    r"\b(?:when|what (?:date|day|time|year|month)|which (?:date|day|year|month)|how long ago|"
    r"how long (?:has|have|did)|quando|que dia|qual dia|que horas|em que (?:data|dia|ano|mês|mes)|"
    r"há quanto tempo)\b"
)
_CURRENT = _Pattern(
    r"\b(?:now|currently|current|these days|nowadays|at the moment|right now|anymore|still|"
    r"am i \w+ing|are you \w+ing|agora|atualmente|atual|hoje em dia|no momento|ainda|"
    r"estou \w+ndo|tô \w+ndo)\b"
)
_PAST = _Pattern(
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


# --- The time a question names --------------------------------------------------------------

_MONTH_NUMBER = {
    name: n
    for n, names in enumerate(
        (
            ("january", "jan", "janeiro"),
            ("february", "feb", "fevereiro", "fev"),
            ("march", "mar", "março", "marco"),
            ("april", "apr", "abril", "abr"),
            ("may", "maio"),
            ("june", "jun", "junho"),
            ("july", "jul", "julho"),
            ("august", "aug", "agosto"),
            ("september", "sep", "sept", "setembro"),
            ("october", "oct", "outubro"),
            ("november", "nov", "novembro"),
            ("december", "dec", "dezembro", "dez"),
        ),
        start=1,
    )
    for name in names
}
# Portuguese "out", "set" and "ago" are left out: "3 out of 5" names no October. The short
# names ("mar", "dec", "may"), and "marco" (a name, a landmark), count only beside a day or a
# year ("in may 2022", "3 mar"); a month alone is a whole name.
_MONTH_WORD = "|".join(
    sorted((m for m in _MONTH_NUMBER if len(m) > 3 and m != "marco"), key=len, reverse=True)
)
_MONTH_ANY = "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True))
_DAY = r"(?P<{0}>[0-3]?\d)(?:st|nd|rd|th|º)?"
_YEAR = r"(?P<{0}>(?:19|20)\d{{2}})"
# What a number that reads as a year may count instead ("in 2000 words", "of 2019 points").
_COUNTED = (
    r"words?|characters?|chars|letters?|pages?|lines?|points?|votes?|steps?|calories|kcal|"
    r"meters?|metres?|km|miles?|kg|people|users?|followers?|items?|units?|rows?|tokens?|"
    r"times|dollars?|euros?|pounds?|reais|bucks|usd|eur|brl|palavras|letras|p[aá]ginas|"
    r"linhas|pontos|votos|passos|metros|quil[oô]metros|pessoas|vezes|itens|unidades"
)
# Each form of an absolute date, most specific first; a later form never takes text an earlier
# one matched. Groups: d (day), m (month name), y (year).
_DATE_FORMS = tuple(
    _Pattern(form)
    for form in (
        r"\b" + _YEAR.format("y") + r"-(?P<mn>[01]\d)-" + r"(?P<d>[0-3]\d)\b",
        r"\b"
        + _DAY.format("d")
        + rf" (?:of |de )?(?P<m>{_MONTH_ANY})\.?(?:,? (?:de |of )?"
        + _YEAR.format("y")
        + r")?\b",
        rf"\b(?P<m>{_MONTH_ANY})\.? "
        + _DAY.format("d")
        + r"\b(?!:)(?:,? "
        + _YEAR.format("y")
        + r")?\b",
        rf"\b(?P<m>{_MONTH_ANY})\.?,? (?:of |de )?" + _YEAR.format("y") + r"\b",
        # A year alone, unless it counts something ("in 2000 words", "de 2000 reais").
        r"\b(?:in|during|since|em|de|of) " + _YEAR.format("y") + rf"\b(?! (?:{_COUNTED})\b)",
        # A month alone: a whole name ("may" only after "in", "of", "during": "may I…" is not one).
        rf"\b(?P<m>{_MONTH_WORD})\b|"
        r"\b(?:in|of|during) (?P<m2>may)\b(?! (?:i|we|you)\b)",
    )
)
_MONTH_ALONE = len(_DATE_FORMS) - 1  # the forms before the month alone
# "march" the verb ("where did they march", "we march") or the walk ("the march to the sea",
# "how long was the march?"); "the March meeting", "January to March" stay months.
_MARCHING = _Pattern(
    r"\b(?:(?:we|they|i|you|will|would|could|should|can|did|does|do|let's) (?P<m>march)\b|"
    r"the (?P<w>march)(?= (?:to|on|for|in|against|through|across|from|and|with)\b|"
    r" of(?! (?:de )?(?:19|20)\d\d)|"
    r" ?[?.,!;:]| ?$))"
)
_RELATIVE_NAMED = _Pattern(
    r"\b(?:(?P<yesterday>yesterday|ontem|last night)|(?P<tomorrow>tomorrow|amanh[ãa])|"
    r"(?P<weekend>last weekend|fim de semana passado)|"
    r"(?P<weekday>last (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday))|"
    # "the past month", "in the last year": the stretch up to today; "last month": the calendar
    # one before now's; "the last week of the trip" (a stretch of something else): neither.
    r"(?:past|the last) (?P<tunit>week|month|year)(?! of\b)|"
    r"last (?P<lunit>week|month|year)(?! of\b)|"
    r"(?P<pt>semana|m[eê]s|ano) passad[oa]|"
    r"next (?P<nunit>week|month|year)|pr[oó]xim[oa] (?P<ptn>semana|m[eê]s|ano)|"
    r"(?P<ptq>semana|m[eê]s|ano) que vem|"
    r"(?:(?P<n>\d+|a|an|one|two|three|four|five|six|um|uma|dois|duas|tr[eê]s|quatro|cinco|seis) "
    r"(?P<unit>days?|weeks?|months?|years?) ago|"
    r"h[aá] (?P<pn>\d+|um|uma|dois|duas|tr[eê]s|quatro|cinco|seis) "
    r"(?P<punit>dias?|semanas?|m[eê]s|meses|anos?)))\b"
)
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "um": 1, "uma": 1, "dois": 2, "duas": 2, "três": 3, "tres": 3, "quatro": 4, "cinco": 5,
    "seis": 6,
}  # fmt: skip
_UNIT_DAYS = {"d": 1, "w": 7, "s": 7, "m": 30, "y": 365, "a": 365}  # by first letter, EN and PT

# Whatever any form above starts with: most questions have none, and one search of this (~1 µs)
# answers them instead of every form's (~19 µs).
_ANY_TIME = _Pattern(
    r"\d|\b(?:"
    + _by_first_letter(
        f"{_MONTH_ANY}|yesterday|ontem|last|past|passad[oa]|ago|h[aá]|tomorrow|amanh[ãa]|next|"
        "pr[oó]xim[oa]|vem"
    )
    + r")\b"
)

Span = tuple[int, int]  # [start, end) in epoch ms, UTC


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _month_span(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    return start, start + timedelta(days=monthrange(year, month)[1])


@lru_cache(maxsize=1024)
def _absolute(text: str, forms: int) -> tuple[tuple[int, int | None, int | None], ...]:
    """Each absolute date the text names as (year or 0, month, day), in order of appearance, by
    the first `forms` of `_DATE_FORMS`: cached (ranking asks once per batch of rows)."""
    found: list[tuple[int, tuple[int, int | None, int | None]]] = []
    # "march" the walk is no month, so its words are taken before any form reads them.
    taken = [m.span("m" if m["m"] else "w") for m in _MARCHING.finditer(text)]
    for form in _DATE_FORMS[:forms]:
        for match in form.finditer(text):
            if any(a < match.end() and match.start() < b for a, b in taken):
                continue
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            month_name = groups.get("m") or groups.get("m2")
            month = (
                int(groups["mn"])
                if "mn" in groups
                else (_MONTH_NUMBER[month_name] if month_name else None)
            )
            day = int(groups["d"]) if "d" in groups else None
            if (month is not None and not 1 <= month <= 12) or (
                day is not None and not 1 <= day <= 31
            ):
                continue
            year = int(groups.get("y", 0))
            taken.append((match.start(), match.end()))
            found.append((match.start(), (year, month, day)))
    return tuple(date for _, date in sorted(found))


def _date_span(year: int, month: int | None, day: int | None) -> tuple[datetime, datetime]:
    if month is None:
        return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    if day is None:
        return _month_span(year, month)
    last = monthrange(year, month)[1]
    start = datetime(year, month, min(day, last), tzinfo=UTC)
    return start, start + timedelta(days=1)


def _unit(word: str | None) -> str | None:
    """`week`, `month` or `year` for an English or Portuguese unit word."""
    return None if word is None else {"w": "week", "s": "week", "m": "month"}.get(word[0], "year")


def _relative(text: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The span a relative phrase names from `now` ("last month": the calendar month before
    now's; "next week": the calendar week after; "two weeks ago": that week; "the past month":
    the 30 days up to and including today)."""
    match = _RELATIVE_NAMED.search(text)
    if match is None:
        return None
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    day = timedelta(days=1)
    if match["yesterday"]:
        return today - day, today
    if match["tomorrow"]:
        return today + day, today + 2 * day
    if match["weekend"]:
        saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
        return saturday, saturday + 2 * day
    if match["weekday"]:  # "last friday": one of the past seven days
        return today - 7 * day, today
    if match["tunit"]:  # through today, as "yesterday" ends where today starts
        width = _UNIT_DAYS[match["tunit"][0]]
        return today - timedelta(days=width), today + day
    back = _unit(match["lunit"] or match["pt"])
    ahead = _unit(match["nunit"] or match["ptn"] or match["ptq"])
    monday = today - timedelta(days=today.weekday())
    if back == "week" or ahead == "week":
        start = monday + (7 * day if ahead else -7 * day)
        return start, start + 7 * day
    if back == "month":
        last = today.replace(day=1) - day
        return _month_span(last.year, last.month)
    if ahead == "month":
        return _month_span(now.year + now.month // 12, now.month % 12 + 1)
    if back or ahead:  # a year
        year = now.year + (1 if ahead else -1)
        return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    raw = match["n"] or match["pn"]
    count = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
    width = _UNIT_DAYS[(match["unit"] or match["punit"])[0]]
    return today - timedelta(days=count * width), today - timedelta(days=(count - 1) * width)


_PAST_TENSE = _Pattern(
    r"\b(?:did|was|were|went|had|got|ago|last|yesterday|ontem|passad[oa]|foi|fui|fiz|fez|"
    r"estive|esteve|tive|teve|era|eram|"
    # The common verbs a question tells the past with but no "did": "what happened in March?",
    # "who visited me in June?" (without a tense, a month goes to the nearer one, often ahead).
    r"happened|visited|started|finished|moved|bought|met|saw|said|told|ate|made|took|came|"
    r"gave|found|wrote|lived|worked|attended|celebrated|joined|tried|watched|played|"
    r"travell?ed|learn(?:ed|t)|won|lost|spent|sent|received|talked|cooked|adopted|signed|"
    r"completed|felt|heard|paid|sold|built|began|ran|flew|drove|stayed|used|"
    r"aconteceu|visit(?:ei|ou|amos|aram)|comprei|comprou|fomos|foram|mud(?:ei|ou|amos)|"
    r"comec(?:ei|ou)|começ(?:ei|ou)|termin(?:ei|ou)|conhec(?:i|eu)|vi|viu|disse|comi|comeu|"
    r"fiquei|ficou|ganhei|ganhou|perdi|perdeu|morei|morou|trabalhei|trabalhou|recebi|recebeu)\b"
)
_AHEAD_TENSE = _Pattern(
    r"\b(?:will|going to|gonna|upcoming|next|plan|planned|planning|due|vou|vai|vamos|irei|"
    r"iremos|pr[oó]xim[oa]s?|que vem)\b|'ll\b"
)


_YEAR_SHIFT = _Pattern(
    r"\b(?:(?P<back>last year|ano passado)|next year|pr[oó]ximo ano|ano que vem)\b"
)


def _year_for(month: int | None, day: int | None, now: datetime, lean: int, named_year: int) -> int:
    """The year of a date named without one: another date's of the same text, else the latest
    one not after `now` (`lean` -1), the earliest one from `now`'s day on (+1), or the nearer
    of those two (0)."""
    if named_year:
        return named_year
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    before = now.year if _date_span(now.year, month, day)[0] <= now else now.year - 1
    after = now.year if _date_span(now.year, month, day)[1] > today else now.year + 1
    if lean < 0 or before == after:
        return before
    if lean > 0:
        return after
    behind = now - _date_span(before, month, day)[1]
    ahead = _date_span(after, month, day)[0] - now
    return before if behind <= ahead else after


def _span_of(text: str, now: datetime, lean: int, forms: int) -> Span | None:
    try:
        return _calendar_span(text, now, lean, forms)
    except (OverflowError, ValueError):
        # Counted to before year 1 or after 9999 ("3000 years ago", "next year" as of 9999-12-31,
        # both valid input): no calendar day, so no time named, rather than a failed recall.
        return None


# Every form before the month alone names a day or a year in digits.
_DIGIT = _Pattern(r"\d")


def _calendar_span(text: str, now: datetime, lean: int, forms: int) -> Span | None:
    # A text without a digit names none of the forms before the month alone: `told_span` of
    # most dated memories ("last week", "yesterday") skips them all (every save and replay reads
    # it: a third of the time, 12,456 LoCoMo texts 0.59 -> 0.21 s).
    dates = () if forms <= _MONTH_ALONE and _DIGIT.search(text) is None else _absolute(text, forms)
    if not dates:
        relative = _relative(text, now)
        return None if relative is None else (_ms(relative[0]), _ms(relative[1]))
    # A date's year is the one another date names, else the one "last year" / "next year"
    # names ("in December last year", asked in December: the one a year ago, not this one).
    named_year = next((year for year, _, _ in dates if year), 0)
    if not named_year and (shift := _YEAR_SHIFT.search(text)) is not None:
        named_year = now.year + (-1 if shift["back"] else 1)
    spans = [
        _date_span(year or _year_for(month, day, now, lean, named_year), month, day)
        for year, month, day in dates
    ]
    return _ms(min(s for s, _ in spans)), _ms(max(e for _, e in spans))


def named_span(question: str, now_ms: int) -> Span | None:
    """The stretch of time `question` names, as [start, end) epoch ms (UTC), or None: every
    absolute date in it (a day, a month, a year), from the first one's start to the last one's
    end; a date without a year takes the year another date of the question names, else the one
    its tense points to from `now_ms` ("where did I go in November?", asked in March: last
    November; "what's due in November?": this one; no tense: the nearer). Without an absolute
    date, a relative one counted from `now_ms` ("yesterday", "last month", "two weeks ago",
    "next week", "mês passado")."""
    text = question.lower()
    if _ANY_TIME.search(text) is None:
        return None
    lean = -1 if _PAST_TENSE.search(text) else 1 if _AHEAD_TENSE.search(text) else 0
    return _span_of(text, datetime.fromtimestamp(now_ms / 1000, UTC), lean, len(_DATE_FORMS))


def told_span(text: str, stated_ms: int) -> Span | None:
    """The stretch of time a memory's own words point to from when it was stated: a relative
    phrase ("I dyed my hair last week", said on 15 April: 3-9 April; "see you tomorrow") or an
    absolute date with a day or a year ("the flight on 18 December": the nearer 18 December to
    when it was said). A month named alone is not read here: in a memory's text it is as often
    a name ("June") as a time; None when the text points to no time."""
    lowered = text.lower()
    if _ANY_TIME.search(lowered) is None:
        return None
    try:
        stated = datetime.fromtimestamp(stated_ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        # Stated past the last calendar day (a record on disk may carry up to `MAX_INT`): its
        # words point to no day. Raising here failed the boot, or the save, that indexed it.
        return None
    return _span_of(lowered, stated, 0, _MONTH_ALONE)
