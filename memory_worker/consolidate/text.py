"""What the consolidation plan reads in a memory's text: its normal form and its load-bearing words.

`normalize()` is the dedup key of the exact tier: casefolded (NFKC), sentence punctuation dropped,
and everything that can change a fact kept — digits with their separators (`3.5`, `6:30`), signs
(`-18`), and symbols such as `+ # $ € % ° < > =` (`C++` is not `C`). Accents and other combining
marks are kept: in Portuguese they tell words apart (`avó` / `avô`, `é` / `e`).
`disagreement()` is the semantic tier's guard: two texts that embed close are still not one fact
when a number, a date word, a name, a family word, a tense word, a negation or a polarity word
differs, when one text's words are a part of the other's (it says more), when the shared words
come in another order (a role swap), or when exactly one word differs.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import cache

from memory_worker.core.text import STOPWORDS

__all__ = [
    "ASPECT_WORDS",
    "DATE_WORDS",
    "KINSHIP_WORDS",
    "NEGATIONS",
    "NUMBER_WORDS",
    "POLAR_WORDS",
    "REORDERED",
    "disagreement",
    "names",
    "normalize",
    "reorder_key",
    "tokens",
]

# The two findings of `disagreement` that are only an order: the same words (or names) placed
# otherwise, which may or may not swap who did what. Everything else it finds is a difference.
NAMES_REORDERED = "names in another order"
WORDS_REORDERED = "shared words in another order"
REORDERED = frozenset({NAMES_REORDERED, WORDS_REORDERED})

# Punctuation that still carries a fact (`#1`, `50%`, `R&D`, `@ana`); any other punctuation mark
# (spaces, . , ; ! ? quotes, brackets, dashes between words) splits. Every symbol is kept
# (`$ € ° + < > = ≤ ≠ ~ ^`, `✓`/`✗`, `★★★`, emoji): `< 200 ms` is not `> 200 ms`, `!=` is not
# `=`. Markdown's code quote is not content.
_KEPT_PUNCTUATION = frozenset("#%&@")
_DROPPED_SYMBOLS = frozenset("`")
# The typographic minus (U+2212), which NFKC keeps: `−18` is `-18`, never `18`; and so is a
# dash typed for it (an en dash, as word processors and many style guides write a minus; the
# figure dash; a hyphen, an em dash, a bar): dropped as punctuation, `–18` read as `18`. A dash
# anywhere else still splits, as `-` does. Emoji presentation selectors only choose how a symbol
# is drawn.
_MINUS_DASHES = "\u2010\u2012\u2013\u2014\u2015"
_FOLD = str.maketrans(
    {"\u2212": "-", **dict.fromkeys(_MINUS_DASHES, "-"), "\ufe0e": None, "\ufe0f": None}
)
_WORD = re.compile(r"[^\W_]+")
_SENTENCE_END = re.compile(r"[.!?]\s")
_APOSTROPHES = re.compile("['\u2019]")

NUMBER_WORDS = frozenset(
    """
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
    hundred thousand million billion dozen half once twice thrice first second third fourth fifth
    sixth seventh eighth ninth tenth
    um uma dois duas três tres quatro cinco seis sete oito nove dez onze doze treze catorze
    quatorze quinze dezesseis dezessete dezoito dezenove vinte trinta quarenta cinquenta sessenta
    setenta oitenta noventa cem cento mil milhão milhões milhao dúzia duzia meia meio primeiro
    primeira segundo terceiro terceira quarto
    """.split()
)
DATE_WORDS = frozenset(
    """
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays thursdays
    fridays saturdays sundays mon tue tues wed thu thur thurs fri sat sun
    today tomorrow yesterday tonight weekend weekends weekday weekdays morning mornings afternoon
    afternoons evening evenings night nights noon midnight am pm spring summer autumn fall winter
    daily weekly monthly yearly annually hourly day days week weeks month months year years hour
    hours minute minutes ago last next
    janeiro fevereiro março marco abril maio junho julho agosto setembro outubro novembro dezembro
    segunda terça terca quarta quinta sexta sábado sabado domingo feira segundas terças quartas
    quintas sextas sábados domingos hoje amanhã amanha ontem manhã manha manhãs tarde tardes noite
    noites madrugada primavera verão verao outono inverno diário diario diária diaria semanal
    mensal anual dia dias semana semanas mês mes meses ano anos hora horas minuto minutos
    passado passada próximo próxima proximo proxima
    """.split()
)
# Counted after apostrophes are removed ("doesn't" → "doesnt").
NEGATIONS = frozenset(
    """
    not no never none nobody nothing nowhere neither nor without cannot dont doesnt didnt isnt
    arent wasnt werent wont cant couldnt shouldnt wouldnt hasnt havent hadnt aint neednt mustnt
    não nao nunca nem jamais nenhum nenhuma ninguém ninguem nada sem
    """.split()
)
# Words whose swap turns a statement into another one: likes and dislikes, frequency, comparison,
# order in time, direction of a transfer, the start or end of something (joining and leaving,
# hiring and firing, marrying and divorcing), former and current.
POLAR_WORDS = frozenset(
    """
    love loves loved loving hate hates hated hating like likes liked dislike dislikes disliked
    enjoy enjoys enjoyed prefer prefers preferred avoid avoids avoided fear fears afraid
    always often usually sometimes rarely seldom occasionally frequently
    more less most least better worse best worst before after earlier later older younger bigger
    smaller larger higher lower above below over under first last
    start starts started starting stop stops stopped stopping quit quits began begin begins
    finished buy buys bought sell sells sold give gives gave given receive receives received
    lend lends lent borrow borrows borrowed win wins won lose loses lost allow allows allowed
    forbid forbids forbidden must should ex former current previous new old
    join joins joined joining leave leaves leaving left enter enters entered exit exits exited
    arrive arrives arrived depart departs departed hire hires hired fire fires fired open opens
    opened close closes closed marry marries married divorce divorced accept accepts accepted
    reject rejects rejected pass passes passed fail fails failed increase increased decrease
    decreased raise raised cut up down little few many much lot lots plenty
    ama amo amam adora adoro odeia odeio detesta detesto gosta gosto gostava prefere prefiro evita
    evito teme sempre frequentemente geralmente raramente mais menos melhor pior antes depois
    maior menor primeiro primeira último última ultimo ultima começou comecou parou deixou comprou
    vendeu deu recebeu emprestou pegou ganhou perdeu ex antigo antiga atual novo nova velho velha
    entrou entra entrar saiu sai sair chegou chega partiu parte contratou contratado contratada
    demitiu demitido demitida abriu abre fechou fecha casou casado casada divorciou divorciado
    divorciada aceitou aceita recusou recusa passou reprovou aumentou aumenta diminuiu diminui
    subiu desceu pouco pouca poucos poucas
    """.split()
)
# When a statement holds: "used to live" and "will move" are not "lives" and "moved", and a wish,
# a need, an attempt or a possibility ("wants to learn", "tried to open", "might move") is not the
# deed ("learned", "opened", "moved").
ASPECT_WORDS = frozenset(
    """
    used formerly previously once still anymore yet will would shall going gonna plan plans
    planned planning until since
    want wants wanted wanting wish wishes wished hope hopes hoped hoping try tries tried trying
    attempt attempts attempted intend intends intended need needs needed might could maybe
    perhaps probably possibly likely unlikely consider considers considering considered
    costumava costumavam antigamente anteriormente ainda já ja vai vão vao irá ira iremos
    pretende pretendia planeja planejava até ate desde
    quer quero queria querem deseja desejo desejava espera espero esperava tenta tento tentou
    tentava tentando precisa preciso precisava talvez poderia possivelmente provavelmente
    considera considerando
    """.split()
)
# Family roles, which also carry a gender: "the user's grandmother" is not "the user's grandfather".
KINSHIP_WORDS = frozenset(
    """
    mother father mom mum dad parent parents sister brother sisters brothers daughter son
    daughters sons wife husband wives husbands aunt uncle niece nephew grandmother grandfather
    grandma grandpa granddaughter grandson cousin girlfriend boyfriend fiancee fiance stepmother
    stepfather
    mãe mae pai pais irmã irma irmão irmao irmãs irmas irmãos irmaos filha filho filhas filhos
    esposa esposo marido mulher tia tio sobrinha sobrinho avó avô avo avós avôs neta neto prima
    primo namorada namorado noiva noivo madrasta padrasto sogra sogro
    """.split()
)
# Capitalised words that are not names when they open a sentence.
_COMMON = STOPWORDS | {"user", "users", "usuário", "usuária", "usuario", "usuaria"}


def _folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().translate(_FOLD)


@cache
def _token_pattern() -> re.Pattern[str]:
    """A number (sign only at a word start, separators only between digits), a word, `!=`, or
    one other character. A word keeps its combining marks: `\\w` has none, and without them
    Devanagari's `कि` and `का` (or Thai's vowel signs) were one word. Built on first use from the
    Basic Multilingual Plane's marks (every living script's)."""
    marks: list[str] = []
    start: int | None = None
    for code in range(0x10000 + 1):
        is_mark = code <= 0xFFFF and unicodedata.category(chr(code)).startswith("M")
        if is_mark and start is None:
            start = code
        elif not is_mark and start is not None:
            marks.append(f"\\u{start:04x}-\\u{code - 1:04x}")
            start = None
    return re.compile(rf"(?<!\w)[-+]?\d+(?:[.,:/]\d+)*|(?:[^\W_]|[{''.join(marks)}])+|!=|[^\w\s]")


def _kept(token: str) -> bool:
    if len(token) > 1 or token.isalnum() or token in _KEPT_PUNCTUATION:
        return True
    if token in _DROPPED_SYMBOLS:
        return False
    # Punctuation splits; so do invisible format characters (zero-width space, soft hyphen).
    return not unicodedata.category(token).startswith(("P", "C"))


def tokens(text: str) -> list[str]:
    """The text's tokens in order, as `normalize()` joins them."""
    return [t for t in _token_pattern().findall(_folded(text)) if _kept(t)]


def normalize(text: str) -> str:
    """The exact tier's key: two texts with the same key state the same words in the same order."""
    return " ".join(tokens(text))


def reorder_key(text: str) -> tuple[str, ...]:
    """The same words in any order (a bag): equal keys with different normal forms are reorders,
    which can flip meaning ("Ana manages Bruno" / "Bruno manages Ana")."""
    return tuple(sorted(tokens(text)))


def names(text: str) -> list[str]:
    """Named things, in order of first appearance: words with a capital letter, except a common
    word opening a sentence ("The", "O", "User")."""
    text = unicodedata.normalize("NFKC", text)
    starts = {0} | {m.end() for m in _SENTENCE_END.finditer(text)}
    out: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group(0)
        if not any(char.isupper() for char in word):
            continue
        folded = word.casefold()
        opening = match.start() in starts or text[: match.start()].strip() == ""
        if opening and folded in _COMMON:
            continue
        if folded not in out:
            out.append(folded)
    return out


def _words(text: str) -> list[str]:
    return _WORD.findall(_APOSTROPHES.sub("", _folded(text)))


def _numbers(toks: Sequence[str]) -> Counter[str]:
    return Counter(t for t in toks if any(c.isdigit() for c in t) or t in NUMBER_WORDS)


def _in(words: Sequence[str], vocabulary: frozenset[str]) -> Counter[str]:
    return Counter(w for w in words if w in vocabulary)


def _one_word_apart(a: Sequence[str], b: Sequence[str]) -> bool:
    """One word replaced, added or removed (token edit distance 1)."""
    if abs(len(a) - len(b)) > 1 or list(a) == list(b):
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    return any(
        list(longer[:i]) + list(longer[i + 1 :]) == list(shorter) for i in range(len(longer))
    )


def _shared_order(a: Sequence[str], b: Sequence[str]) -> tuple[list[str], list[str]]:
    """The content words both texts use, each in the order its own text uses them."""
    content_a = [t for t in a if t not in STOPWORDS]
    content_b = [t for t in b if t not in STOPWORDS]
    common = set(content_a) & set(content_b)

    def order(seq: list[str]) -> list[str]:
        seen: list[str] = []
        for token in seq:
            if token in common and token not in seen:
                seen.append(token)
        return seen

    return order(content_a), order(content_b)


def _differ(label: str, a: Counter[str], b: Counter[str]) -> str | None:
    if a == b:
        return None
    only_a = sorted((a - b).elements())
    only_b = sorted((b - a).elements())
    return f"{label} differ ({' '.join(only_a) or '-'} / {' '.join(only_b) or '-'})"


# Words already compared by a list above, and present-time fillers a restatement swaps freely.
_PRESENT = frozenset({"now", "currently", "presently", "agora", "atualmente", "actualmente"})
_CHECKED = DATE_WORDS | KINSHIP_WORDS | ASPECT_WORDS | NEGATIONS | POLAR_WORDS | _PRESENT


def _swapped_words(a: Sequence[str], b: Sequence[str]) -> str | None:
    """A content word on each side that the other lacks (no shared stem of 3+ letters): a reworded
    correction ("allergic to peanuts" / "a penicillin allergy", "email alice@…" / "email bob@…")
    clears every word list and embeds at cosine 0.94, yet states another fact."""

    def only(mine: Sequence[str], theirs: Sequence[str]) -> list[str]:
        other = {t for t in theirs if t not in _COMMON}
        return sorted(
            {
                t
                for t in mine
                if t not in _COMMON
                and t not in _CHECKED
                and t not in other
                and not any(t[:3] == o[:3] for o in other)
            }
        )

    left, right = only(a, b), only(b, a)
    if left and right:
        return f"different words ({' '.join(left)} / {' '.join(right)})"
    return None


def disagreement(a: str, b: str) -> str | None:
    """Why two texts are not safely one fact, or None when nothing load-bearing differs."""
    toks_a, toks_b = tokens(a), tokens(b)
    if _one_word_apart(toks_a, toks_b):
        return "one word differs"
    words_a, words_b = _words(a), _words(b)
    checks = (
        ("numbers", _numbers(toks_a), _numbers(toks_b)),
        ("dates", _in(words_a, DATE_WORDS), _in(words_b, DATE_WORDS)),
        ("names", Counter(names(a)), Counter(names(b))),
        ("family words", _in(words_a, KINSHIP_WORDS), _in(words_b, KINSHIP_WORDS)),
        ("tense words", _in(words_a, ASPECT_WORDS), _in(words_b, ASPECT_WORDS)),
        ("negations", _in(words_a, NEGATIONS), _in(words_b, NEGATIONS)),
        ("polarity words", _in(words_a, POLAR_WORDS), _in(words_b, POLAR_WORDS)),
    )
    for label, left, right in checks:
        if (why := _differ(label, left, right)) is not None:
            return why
    if names(a) != names(b):
        return NAMES_REORDERED
    if (swapped := _swapped_words(toks_a, toks_b)) is not None:
        return swapped
    content_a = {t for t in toks_a if t not in STOPWORDS}
    content_b = {t for t in toks_b if t not in STOPWORDS}
    if content_a != content_b and (content_a <= content_b or content_b <= content_a):
        extra = sorted(content_a ^ content_b)
        return f"one text says more ({' '.join(extra)})"
    order_a, order_b = _shared_order(toks_a, toks_b)
    if order_a != order_b:
        return WORDS_REORDERED
    return None
