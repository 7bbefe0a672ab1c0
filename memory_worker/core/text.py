"""Text normalisation, the stable content fingerprint, and the recall tokenizer.

`fingerprint()` ids are persisted: they must stay byte-for-byte identical to the Rust worker's
(whitespace per Rust `char::is_whitespace`, then Unicode lowercase, then 64-bit FNV-1a over UTF-8).
`terms()` is the one analyzer both the index and queries use, so documents and queries always agree.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import cache

import Stemmer  # type: ignore[import-not-found]  # PyStemmer: C Snowball stemmers

__all__ = [
    "FIRST_PERSON",
    "STOPWORDS",
    "USER_ENTITY",
    "answer_type",
    "asks",
    "collapse_whitespace",
    "fingerprint",
    "language",
    "normalize",
    "terms",
    "tokenize",
]

# Rust's `char::is_whitespace` (Unicode White_Space). Python's `str.split()` also splits on
# U+001C..U+001F, which Rust keeps; ids must match the reference, so the set is spelled out.
_WHITESPACE = re.compile(
    "[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"
)
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF


# The only characters Python's `str.split()` treats as whitespace and Rust does not.
_PY_ONLY_WHITESPACE = re.compile("[\x1c-\x1f]")  # one C scan, not four


def collapse_whitespace(text: str) -> str:
    """Split on Unicode whitespace and join with single spaces (leading/trailing dropped)."""
    if _PY_ONLY_WHITESPACE.search(text) is None:
        return " ".join(text.split())  # C speed; same split as Rust's for every other character
    return " ".join(part for part in _WHITESPACE.split(text) if part)


def normalize(text: str) -> str:
    """The fingerprinted form: whitespace collapsed first, then Unicode lowercase."""
    # A save normalizes its one text object three times in a row (the duplicate check, its id,
    # the commit's text key), ~4 µs each: the last answer is kept for that same object. By
    # identity, not equality (no string compare), and as one tuple, read and replaced whole, so
    # a thread calling meanwhile sees a pair that belongs together.
    global _last_normalized
    last = _last_normalized
    if last[0] is text:
        return last[1]
    norm = collapse_whitespace(text).lower()
    _last_normalized = (text, norm)
    return norm


_last_normalized: tuple[str | None, str] = (None, "")


def fingerprint(text: str) -> str:
    """`fp` + 16 lowercase hex of 64-bit FNV-1a over the UTF-8 of `normalize(text)`."""
    data = normalize(text).encode("utf-8", "surrogatepass")
    h, prime, mask = _FNV_OFFSET, _FNV_PRIME, _MASK64
    # Four bytes a step, masked once: a product's low 64 bits depend only on its factors' low
    # 64 bits, so the bits above them, dropped at the end of the step, change nothing below.
    # A quarter of the loop's steps and masks (every save fingerprints its text).
    quads = iter(data)
    for b0, b1, b2, b3 in zip(quads, quads, quads, quads, strict=False):
        h = (((((h ^ b0) * prime ^ b1) * prime ^ b2) * prime ^ b3) * prime) & mask
    for byte in data[len(data) & ~3 :]:
        h = ((h ^ byte) * prime) & mask
    return f"fp{h:016x}"


# --- tokenizer -------------------------------------------------------------------------------

# Scripts written without spaces: each character is a unigram plus a bigram with its neighbour.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_ASCII_TOKEN = re.compile("[a-z0-9]+")
# Combining diacritical marks NFKC left apart from their letter (it composes most, not all):
# `re` reads them as no word character, so a word was cut at each. "İ".lower() is "i" and
# U+0307, so "İstanbul" was "i" (the person talking) and "stanbul". Dropped, as `terms` drops
# every accent.
_STRAY_MARK = re.compile("[\u0300-\u036f]")
# Pictographs (emoji, dingbats, `✅`, `⭐`): not letters, yet a term each, as people search them
# (not the skin-tone modifiers, U+1F3FB..U+1F3FF, which only shade the one before).
_PICTOGRAPH = "\u2600-\u27bf\u2b00-\u2bff\U0001f000-\U0001f3fa\U0001f400-\U0001faff"


@cache
def _unicode_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Word runs of any script, and a CJK character: compiled on the first text that is not
    ASCII, since their Unicode classes take ~6 ms to compile and an English-only process (a
    one-shot CLI save) never needs them."""
    return re.compile(f"[{_CJK}]+|[^\\W_{_CJK}]+|[{_PICTOGRAPH}]"), re.compile(f"[{_CJK}]")


USER_ENTITY = "user"
# First-person words (English and Portuguese) stand for the person talking, whom memories call
# "the user": mapping them to one term lets "what's my name?" reach "The user's name is Ana".
# Only the forms with their apostrophe: written without one, "id", "im" and "ive" are words of
# their own ("session id", "IM"), and would make a memory about them look like one about the user.
FIRST_PERSON = frozenset(
    "i me my mine myself i'm i've i'd i'll eu mim meu minha meus minhas comigo".split()
)

_EN_STOPWORDS = """
a about above after again against all am an and any are aren't as at be because been
before being below between both but by can can't cannot could couldn't did didn't do does
doesn't doing don't down during each few for from further had hadn't has hasn't have
haven't having he he'd he'll he's her here here's hers herself him himself his how how's
if in into is isn't it it's its itself let's more most mustn't no nor not of off on once
only or other ought our ours ourselves out over own same shan't she she'd she'll she's
should shouldn't so some such than that that's the their theirs them themselves then there
there's these they they'd they'll they're they've this those through to too under until up
very was wasn't we we'd we'll we're we've were weren't what what's when when's where
where's which while who who's whom why why's with won't would wouldn't you you'd you'll
you're you've your yours yourself yourselves s t d ll m re ve also just will shall may
might must us does get got tell know please
""".split()
_PT_STOPWORDS = """
a ao aos aquela aquelas aquele aqueles aquilo as até com como da das de dela delas dele
deles depois do dos e ela elas ele eles em entre era eram essa essas esse esses esta estas
este estes estou está estão eu foi fomos for foram fosse há isso isto já la lhe lhes lo
mas me mesmo muito na nas nem no nos nossa nossas nosso nossos num numa não o os ou para
pela pelas pelo pelos por qual quando que quem se sem ser seu seus sua suas são só também
te tem tinha tu tua tuas teu teus um uma umas uns você vocês vos à às é qual quais onde
porque sobre tenho tens temos têm ter estar estava sou és somos seja sejam
""".split()
STOPWORDS_EN = frozenset(_EN_STOPWORDS)
STOPWORDS_PT = frozenset(_PT_STOPWORDS)
STOPWORDS = STOPWORDS_EN | STOPWORDS_PT


_QUESTION_MARKS = ("?", "\uff1f")  # ASCII and full-width (CJK)


def asks(text: str) -> bool:
    """Whether `text` asks something (holds a question mark): a stated fact never does, a
    conversation turn often does, and what answers it is the turn after."""
    return any(mark in text for mark in _QUESTION_MARKS)


# A list question names the kind of thing it wants before its verb: "What European countries has
# Maria been to?", "Which books does Tim read?", "What kinds of games have you tried?". The
# answers name instances ("Spain", "England") and rarely the kind; the kind is the part of the
# question a semantic arm can carry to them. In English: a plural noun of one to three words
# ending in "s", then an auxiliary; in Portuguese, `_pt_answer_type`. A spoken lead-in ("So,
# what…", "and which…") is passed over. An agent often asks as a request ("Can you tell me which
# restaurants I liked?", "Remind me what foods I'm allergic to", "List the countries Maria
# visited"): the question is then embedded, its subject (a pronoun, a possessive, "the", or a
# capitalised name) before its verb, and that subject ends the kind as an auxiliary does.
_EN_LEAD = r"^\s*(?:(?:so|and|but|or|then|also|ok|okay|well|now|please|hey)\b[\s,]*)*"
_EN_KIND = r"((?:[^\W\d_][\w'\u2019-]*\s+){0,2}?[a-z-]+s)\s+"
# Not "am", "was", "were", "will", "can"…: "What foods am I allergic to?" (the golden persona's
# tuning query old-05) ranked its answer lower with a kind (the kind "foods" pulled toward the
# diet and the recipes, away from the allergy), and no LoCoMo tuning question moved.
_EN_AUX = r"(?:has|have|does|do|did|is|are)\s"
_EN_SUBJECT = r"(?:(?:i|i'm|i've|you|he|she|we|they|my|your|his|her|our|their|the)\s|(?-i:[A-Z])\w)"
_LIST_QUESTION = re.compile(
    _EN_LEAD + r"(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?" + _EN_KIND + _EN_AUX,
    re.IGNORECASE,
)
_EN_REQUEST = (
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?|please\s+)?"
    r"(?:tell\s+me|remind\s+me(?:\s+of)?|show\s+me|do\s+you\s+(?:remember|know|recall)|"
    r"i\s+(?:forgot|forget|wonder|was\s+wondering|(?:don't|do\s+not|can't|cannot)\s+"
    r"(?:remember|recall))|remember|recall)\s+(?:again\s+)?"
)
_EMBEDDED_LIST = re.compile(
    _EN_LEAD
    + _EN_REQUEST
    + r"(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?"
    + _EN_KIND
    + r"(?:"
    + _EN_AUX
    + "|"
    + _EN_SUBJECT
    + ")",
    re.IGNORECASE,
)
_NAMED_LIST = re.compile(
    _EN_LEAD + r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?)?(?:list|name)\s+"
    r"(?:all\s+(?:of\s+)?)?(?:the|my|your|his|her|our|their)\s+"
    + _EN_KIND
    + r"(?:that\s+|which\s+)?(?:"
    + _EN_AUX
    + "|"
    + _EN_SUBJECT
    + ")",
    re.IGNORECASE,
)


# Not a kind of thing: a singular noun ending in "ss" ("What workout class did she start?"),
# "us" ("status", "bus"; "menus" is lost with them), "sis"/"xis"/"itis" ("analysis"), an
# uncountable one ("physics"; "news" stays: "What news did Maria share?" is answered by the
# news), and units of time, whose answers are times ("which days do I commute?": the dates'
# machinery).
_NOT_A_KIND = re.compile(
    r"(?:ss|us|sis|xis|itis|\b(?:days|weeks|weekends|months|years|times|hours|minutes|dates|"
    r"nights|mornings|evenings|afternoons|seasons|decades|means|gas|lens|chaos|bias|canvas|"
    r"atlas|alias|tennis|physics|mathematics|maths|economics|politics|ethics|athletics|"
    r"gymnastics|this|thus|yes|its|his|hers|ours|yours|theirs|always|perhaps|whereas))$",
    re.IGNORECASE,
)

# Words no kind holds: an auxiliary, a determiner or a pronoun means the question's verb or
# object was taken for one ("What do her parents do…" is not asking for "do her parents", nor
# "Which of the dogs is older?" for "of the dogs"). A preposition or a conjunction may be part
# of one ("events for veterans", "places or events").
_NOT_IN_A_KIND = frozenset(
    """
    a an the this that these those my your his her its our their some any all every each
    no do does did is are was were be been has have had i you he she we they me him them
    """.split()
)


# Verbs in "-s" an embedded question opens with, its object then read as the subject that ends
# a kind ("Can you tell me what motivates Evan to…", "which song motivates Caroline…": LoCoMo's
# questions so asked): rarely the plural noun a list asks for ("causes", "interests", "shows",
# "needs", "worries", "health scares" are, and are not here).
_VERBS_IN_S = frozenset(
    """
    makes helps matters happens keeps bothers excites motivates inspires impresses fuels annoys
    upsets hurts gets gives brings lets seems belongs depends involves includes requires reminds
    calms relaxes frustrates bores comes goes thinks says believes knows feels
    """.split()
)


def answer_type(question: str) -> str | None:
    """The kind of thing a list question asks for ("European countries" of "What European
    countries has Maria been to?"), as written (lowercased when shouted); None when `question`
    is not one."""
    found = (
        _LIST_QUESTION.match(question)
        or _EMBEDDED_LIST.match(question)
        or _NAMED_LIST.match(question)
    )
    if found is None:
        return _pt_answer_type(question)
    kind = found.group(1)
    words = kind.split()
    if _NOT_A_KIND.search(kind) or any(word.lower() in _NOT_IN_A_KIND for word in words):
        return None
    if words[-1].lower() in _VERBS_IN_S:
        return None
    # All capitals is a shouted question, not an acronym: the kind as the model reads words.
    return kind.lower() if kind.isupper() else kind


# A Portuguese list question: "quais"/"que" (after a lead-in, or a preposition: "Em quais
# cidades…"), "são os" or "os meus" between ("Quais são os hobbies do João?"), and "tipos de"
# ("Que tipos de exercício eu faço?"). Not "qual" (one thing), not "o que" ("o que eu fiz": no
# kind), not "quantos" (a count, as "How many dogs…" is none in English).
_PT_LIST_QUESTION = re.compile(
    r"^\s*(?:(?:e|então|entao|mas|ou|daí|também|ok|okay|bem|bom|agora)\b[\s,]*)*"
    # A request or a confession around it: "Você lembra quais países…", "Me diga que livros…",
    # "Pode me dizer quais…", "Esqueci quais…".
    r"(?P<ask>(?:(?:você|voce|tu)\s+)?(?:(?:pode|podes|poderia|poderias)\s+)?(?:me\s+)?"
    r"(?:lembra|lembras|lembrar|lembre|sabe|sabes|diga|dizer|diz|conta|contar|fala|falar|"
    r"mostra|mostrar)(?:-me)?\s+|(?:eu\s+)?(?:esqueci|(?:não|nao)\s+(?:me\s+)?lembro)"
    r"(?:\s+de)?\s+)?"
    r"(?:(?:em|de|com|para|pra|por|a|sobre|entre)\s+)?"
    r"(?:quais(?:\s+(?:são|sao|foram|eram|serão|seriam))?(?:\s+(?:os|as))?"
    r"(?:\s+(?:meus|minhas|seus|suas|teus|tuas|nossos|nossas))?|(?P<que>que))\s+"
    r"(?:(?P<sort>tipos?|espécies?|especies?)\s+de\s+)?",
    re.IGNORECASE,
)
_PT_WORD = re.compile(r"[^\W\d_][\w'\u2019-]*")
# Portuguese has no auxiliary to end the kind: it is the run of plural words after "quais"/"que"
# (a noun and the adjectives agreeing with it: "países europeus"), up to three, cut at the first
# other word: the subject ("a Maria", "eu", "Marcos": a name is capitalised, an adjective not),
# or the verb. Words ending in "s" that are no kind end it too: determiners, pronouns and
# quantifiers ("vocês", "meus", "mais"), the verb forms in "-s" a question puts there (the
# "tu" forms, "Que achas?", and "-mos": "Que livros lemos?"; the nouns in "-mos" are listed),
# and singular nouns in "-s": in a consonant then "-us" ("ônibus", "vírus", "status"), stressed
# "-ás/-ês/-ís" ("mês", "país", "inglês"), and a few more ("lápis", "tênis", "óculos").
_PT_NOT_IN_A_KIND = frozenset(
    """
    os as nos nas dos das aos às pelos pelas uns umas meus minhas seus suas teus tuas nossos
    nossas vossos vossas deles delas estes estas esses essas aqueles aquelas destes destas
    desses dessas daqueles daquelas vocês voces eles elas nós vós mais menos demais vários
    várias muitos muitas poucos poucas todos todas ambos ambas alguns algumas quantos quantas
    tantos tantas mesmos mesmas próprios próprias dois duas três seis depois antes após apenas
    pois jamais talvez através atrás simples
    és estás tens vais fazes dizes queres podes sabes achas pensas gostas preferes precisas
    costumas lembras conheces deves recomendas sugeres usas moras trabalhas estudas jogas
    ouves assistes vês lês ias eras tinhas estavas fazias querias podias sabias
    lápis tênis ténis íris oásis pires óculos parabéns herpes diabetes
    """.split()
)
_PT_MOS_NOUNS = frozenset(
    "termos ramos ritmos algoritmos primos próximos íntimos ótimos últimos mínimos máximos".split()
)
_PT_SINGULAR = re.compile(r"(?:[^aeiouáéíóúâêôãõ]us|[áêí]s)$", re.IGNORECASE)
# Units of time (and parts of a day), whose answers are times: "Em que dias…", "Quais fins de
# semana…", "Que aulas de manhã…" (the dates' machinery), as in English.
_PT_TIME = frozenset(
    """
    dia dias semana semanas fim fins final finais mês meses ano anos vez vezes hora horas
    minuto minutos segundo segundos noite noites manhã manhãs tarde tardes madrugada
    madrugadas data datas época épocas estação estações década décadas século séculos
    período períodos hoje ontem amanhã
    """.split()
)


def _pt_kind_word(word: str, shouted: bool) -> bool:
    """Whether `word` may be part of a Portuguese kind (lowercase: a name is capitalised)."""
    lower = word.lower()
    return (
        (shouted or word == lower)
        and lower not in _PT_NOT_IN_A_KIND
        and lower not in STOPWORDS
        and lower not in _USER_WORDS
        and (not lower.endswith("mos") or lower in _PT_MOS_NOUNS)
    )


# What may open the subject of a Portuguese embedded question: an article, a personal
# pronoun, a possessive ("o Tim", "eu", "a gente", "meu pai"); a name is capitalised.
_PT_SUBJECT = frozenset(
    """
    o a os as eu você voce tu ele ela nós nos vocês voces eles elas meu minha meus minhas seu
    sua seus suas teu tua nosso nossa nossos nossas um uma
    """.split()
)


def _pt_subject(word: str) -> bool:
    return word.lower() in _PT_SUBJECT or word[:1].isupper()


def _pt_answer_type(question: str) -> str | None:
    """The kind a Portuguese list question asks for ("países europeus" of "Quais países
    europeus a Maria visitou?"; "exercício" of "Que tipos de exercício eu faço?"), or None."""
    found = _PT_LIST_QUESTION.match(question)
    if found is None:
        return None
    rest = question[found.end() :]
    shouted = rest.isupper()
    # Stop at the first mark: what follows a comma or "?" is another clause.
    words = _PT_WORD.findall(re.split(r"[,;:?!.\uff1f]", rest, maxsplit=1)[0])
    if words and words[0].lower() in ("outros", "outras"):
        words = words[1:]  # "Quais outros livros…" asks for books ("Quais outros?": nothing)
    # After "tipos de" the noun may be singular ("tipos de exercício"): "tipos" counts it.
    counted = (found.group("sort") or "").lower().endswith("s")
    kind: list[str] = []
    for word in words[:3]:
        lower = word.lower()
        plural = lower.endswith("s") and not _PT_SINGULAR.search(lower)
        if not _pt_kind_word(word, shouted) or not (plural or (counted and not kind)):
            break
        kind.append(word)
        if not plural:
            break  # a singular noun after "tipos de": the adjectives after it are not plural
    if not kind:
        return None
    # "de" and a word qualify the kind: "jogos de tabuleiro", "aulas de dança".
    after = words[len(kind) : len(kind) + 2]
    if len(after) == 2 and after[0].lower() == "de" and _pt_kind_word(after[1], shouted):
        kind += after
    if any(word.lower() in _PT_TIME for word in kind):
        return None
    # After a verb of knowing or telling, "que" is mostly "that" ("Você sabe que gatos gostam de
    # peixe?"): it asks for a kind only when the embedded question's own subject follows ("Me
    # diga que livros o Tim leu"), not when the plural noun is that clause's subject.
    if found.group("ask") and found.group("que") and not found.group("sort"):
        following = words[len(kind) : len(kind) + 1]
        if not following or not _pt_subject(following[0]):
            return None
    text = " ".join(kind)
    return text.lower() if shouted else text


def tokenize(text: str) -> list[str]:
    """Lowercased word runs (Unicode letters and digits), CJK as unigrams plus adjacent bigrams,
    each pictograph one."""
    if text.isascii():  # the common case, at C speed
        return _ASCII_TOKEN.findall(text.lower())
    folded = unicodedata.normalize("NFKC", text).lower()
    if _STRAY_MARK.search(folded):
        folded = _STRAY_MARK.sub("", folded)
    token, cjk_run = _unicode_patterns()
    out: list[str] = []
    for run in token.findall(folded):
        if run[0] >= "\u3040" and cjk_run.match(run):
            previous = ""
            for char in run:
                out.append(char)
                if previous:
                    out.append(previous + char)
                previous = char
        else:
            out.append(run)
    return out


_EN_ONLY = STOPWORDS_EN - STOPWORDS_PT
_PT_ONLY = STOPWORDS_PT - STOPWORDS_EN
_PT_LETTERS = frozenset("ãõçâêôáéíóúà")
_STEMMERS = {"en": Stemmer.Stemmer("english"), "pt": Stemmer.Stemmer("portuguese")}
# "The user …" / "O usuário …": how memories name the person talking, in either language.
_USER_WORDS = FIRST_PERSON | frozenset({"user", "users", "usuário", "usuária", "utilizador"})


_SKIP = STOPWORDS | _USER_WORDS
# The stopwords written with an apostrophe, as the tokenizer splits them ("isn't" → "isn", "t"):
# the trailing half is a stopword of its own, the leading one ("isn", "doesn", "let", "won") is
# not, and was a content term that matched every memory with a negation in it.
_CONTRACTIONS = frozenset(tuple(word.split("'")) for word in STOPWORDS_EN if word.count("'") == 1)


def _without_contractions(tokens: list[str]) -> list[str]:
    """The content words of `tokens`, a stopword's halves dropped together ("won't" goes, "won"
    alone stays)."""
    words = []
    for at, token in enumerate(tokens):
        if token in _SKIP:
            continue
        if at + 1 < len(tokens) and (token, tokens[at + 1]) in _CONTRACTIONS:
            continue
        words.append(token)
    return words


def language(tokens: list[str]) -> str:
    """`pt` when Portuguese function words or letters outvote English ones, else `en`."""
    pt = en = 0
    for token in tokens:
        if token in _PT_ONLY:
            pt += 1
        elif token in _EN_ONLY:
            en += 1
        elif not token.isascii() and _PT_LETTERS.intersection(token):
            pt += 1
    return "pt" if pt > en else "en"


def _fold(term: str) -> str:
    """Drop accents, so "ação" and "acao" (as people type on any keyboard) meet."""
    decomposed = unicodedata.normalize("NFKD", term)
    folded = "".join(c for c in decomposed if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", folded)


def terms(text: str, known: Callable[[str], bool] | None = None) -> list[str]:
    """Content terms for ranking (a bag: order is not kept): first-person words and "user" become
    `user`, stopwords are dropped, the rest is stemmed (Snowball, English or Portuguese by the
    text's own words) and accent-folded.

    `known` (a query's: whether the bank holds a term): a word whose stem in the text's language
    is not known but whose stem in the other language is takes that one. A memory is stemmed by
    its own language, and a short query cannot say its own: "Lisboa", "cafe" or "acucar" read as
    English and missed "O usuário mora em Lisboa", "café" and "açúcar" stemmed as Portuguese."""
    text = text.replace("\u2019", "'") if "\u2019" in text else text
    tokens = tokenize(text)
    words = [t for t in tokens if t not in _SKIP]
    if words and "'" in text:
        words = _without_contractions(tokens)
    lang = language(tokens)
    out: list[str] = _stem(lang, words) if words else []
    if not text.isascii():
        out = [_folded(stem) for stem in out]
    if known is not None and out:
        _known_stems(out, words, lang, known)
    user_mentions = sum(map(_USER_WORDS.__contains__, tokens))
    if _JOINED.search(text):
        for compound in _compounds(text):
            parts = tokenize(compound)
            if _IN_CODE.search(compound) or compound.count("/") > 1:
                # `user_id`, `get_user_by_id`, `src/users/models`: a name in code, not the
                # person talking. One slash alone is prose as often ("the user/customer", "my/our
                # team"): its words still speak of them.
                user_mentions -= sum(map(_USER_WORDS.__contains__, parts))
            # A version or a full date (`3.11.7`, `15/03/2024`) is a term whole too, or `3.7.11`
            # ties with it; a time or a day (`6:30`, `15/03`) only by its parts (whole too, the
            # golden set's times ranked worse: a memory's other wording of it lost a term).
            if len(parts) > 2 or not all(part.isdigit() for part in parts):
                out.append(_folded(compound))
    if _CAMEL_AT.search(text):
        # `getUserById` is `get_user_by_id` (one more term, that compound's): the same name
        # in another language's convention.
        out.extend(_folded("_".join(parts)) for parts in _camel_parts(text))
    if user_mentions:
        out.extend([USER_ENTITY] * user_mentions)
    return out


def _known_stems(
    stems: list[str], words: list[str], lang: str, known: Callable[[str], bool]
) -> None:
    """In place: each of `stems` (of `words`, in `lang`) that is not `known` but whose stem in
    the other language is, replaced by that one. Only the words whose stem missed are stemmed
    again: each word stems on its own, so theirs are the stems stemming them all gave (a
    question's every word was stemmed twice when one missed)."""
    unknown = [at for at, stem in enumerate(stems) if not known(stem)]
    if not unknown:
        return
    other = _stem("en" if lang == "pt" else "pt", [words[at] for at in unknown])
    for at, alt_stem in zip(unknown, other, strict=True):
        alt = _folded(alt_stem)
        if known(alt):
            stems[at] = alt


# Word runs joined by these, with no space: an identifier (`get_user_by_id`, `memory::recall`),
# a path (`src/api/routes.py`), a host (`localhost:8080`), an address (`ana@example.com`). Its parts
# are terms as any word's, and the whole is one more, so a query naming it exactly finds the
# memory holding it verbatim first, above others sharing a part (`id`, `py`). Each starts a
# word: tried inside one, it would scan the rest of the word again, and again.
# A word with `++` or `#` after it (`C++`, `C#`, `F#`) is a compound of one part: otherwise a
# lone `c` or `f`, the same term for all of them.
_ASCII_COMPOUND = re.compile(
    r"(?<![a-z0-9])[a-z0-9]+(?:[_./\\:@]+[a-z0-9]+)+|(?<![a-z0-9+#])[a-z0-9]+(?:\+\+|#)(?![\w+#])"
)
_COMPOUND = re.compile(
    r"(?<![^\W_])[^\W_]+(?:[_./\\:@]+[^\W_]+)+|(?<![\w+#])[^\W_]+(?:\+\+|#)(?![\w+#])"
)
# The joiners only code writes (a slash alone joins words in prose too: "and/or").
_IN_CODE = re.compile(r"[_.\\:@]")
# A connector with a word after it, or a word's `++` or `#`: the cheap test of whether a text
# may hold a compound (a full stop ends most sentences, and no word follows it there).
# (Each branch starts from its symbol: sought from a word character, it was six times slower.)
_JOINED = re.compile(r"[_./\\:@](?=[^\W_])|[+#](?<=[^\W_][+#])")


def _compounds(text: str) -> list[str]:
    """The lowercased compounds of `text`, folded as `tokenize` folds it."""
    if text.isascii():
        return _ASCII_COMPOUND.findall(text.lower())
    folded = unicodedata.normalize("NFKC", text).lower()
    # The stray marks `tokenize` drops, dropped here too: kept, they cut a compound as they
    # cut a word ("İstanbul.com" was "stanbul.com", never the lower-case query's term).
    return _COMPOUND.findall(_STRAY_MARK.sub("", folded))


# A lowercase letter or a digit, then a capital: where a camelCase name's words meet.
_CAMEL = re.compile("([a-z0-9])([A-Z])")
_CAMEL_AT = re.compile("[A-Z](?<=[a-z0-9].)")  # the same, sought from the capital: faster
# A name in code's camelCase: lowercase first, a capital inside (`getUserById`, `userId`). Not
# a capital first: "WordPress", "GitHub", "LazyVim" are names of things as often as
# `UserService` is a class, and a term more on each moved the golden set's recall.
_CAMEL_NAME = re.compile(r"(?<![^\W_])[a-z][a-z0-9]*[A-Z][^\W_]*")


def _camel_parts(text: str) -> list[list[str]]:
    """The lowercased words of each camelCase name in `text` (`getUserById`: get, user, by,
    id)."""
    names = _CAMEL_NAME.findall(text if text.isascii() else unicodedata.normalize("NFKC", text))
    return [tokenize(_CAMEL.sub(r"\1 \2", name)) for name in names]


# Portuguese plurals of nasal endings, which Snowball's Portuguese stemmer leaves apart from their
# singulars: "manhãs" / "manhã", "limões" / "limão" (stems "limo" / "lima"), "pães" / "pão",
# "irmãos" / "irmão". Each is made singular before stemming, so a question in the singular finds
# a memory in the plural, as every regular plural ("cidades" / "cidade") already did.
_PT_NASAL_PLURALS = (("ões", "ão"), ("ães", "ão"), ("ãos", "ão"), ("ãs", "ã"))


# English plurals no suffix rule reaches: Snowball kept "children" apart from "child" and "wives"
# ("wive") from "wife". Not "lives" or "leaves", which are verbs as often ("the user lives in…").
_EN_IRREGULAR = {
    "children": "child",
    "grandchildren": "grandchild",
    "men": "man",
    "women": "woman",
    "wives": "wife",
    "knives": "knife",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "geese": "goose",
    "people": "person",
}


def _stem(lang: str, words: list[str]) -> list[str]:
    if lang == "pt":
        words = [_pt_singular(word) for word in words]
    elif not _EN_IRREGULAR.keys().isdisjoint(words):
        words = [_EN_IRREGULAR.get(word, word) for word in words]
    stems: list[str] = _STEMMERS[lang].stemWords(words)
    return stems


# Plurals Snowball also leaves apart from their singulars, made singular the same way (the
# longest ending first; a word no longer than its `shortest` is left alone): "-m" → "-ns"
# ("viagens", "homens", "bons"), "-al" → "-ais", "-el" → "-éis", "-vel" → "-veis", "-eu" → "-eus"
# ("animais", "papéis", "possíveis", "museus"), and a stressed final vowel ("chás", "cafés",
# "avós", "robôs": Snowball drops the singular's vowel, "café" → "caf", and keeps the plural).
# Not "-ês", a singular's ending (mês, inglês, três), nor "-óis" (herói, heróis); the length
# keeps "gás", "mais", "pais", "Deus" and "réis" whole.
_PT_PLURALS = (
    ("veis", "vel", 5),
    ("ais", "al", 4),
    ("éis", "el", 4),
    ("eus", "eu", 4),
    ("éus", "éu", 4),
)
_PT_PLURAL_M = re.compile("[aeiouáéíóúâêô]ns")
_PT_STRESSED_PLURAL = re.compile("[áéóô]s")


def _pt_singular(word: str) -> str:
    if not word.isascii():
        for plural, singular in _PT_NASAL_PLURALS:
            if word.endswith(plural) and len(word) > len(plural) + 1:
                return word[: -len(plural)] + singular
    size = len(word)
    if size <= 3:
        return word
    for plural, singular, shortest in _PT_PLURALS:
        if size > shortest and word.endswith(plural):
            return word[: -len(plural)] + singular
    if _PT_PLURAL_M.fullmatch(word, size - 3):
        return word[:-2] + "m"
    if _PT_STRESSED_PLURAL.fullmatch(word, size - 2):
        return word[:-1]
    return word


def _folded(stem: str) -> str:
    return stem if stem.isascii() else _fold(stem)
