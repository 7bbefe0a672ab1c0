from __future__ import annotations

import string
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_worker.core.text import (
    collapse_whitespace,
    fingerprint,
    language,
    normalize,
    terms,
    tokenize,
)


def _fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) % 2**64
    return h


class TestFingerprint:
    def test_known_fnv1a_vectors(self) -> None:
        # Published FNV-1a 64 test vectors: "" and "a" and "foobar".
        assert fingerprint("") == "fpcbf29ce484222325"
        assert fingerprint("a") == "fpaf63dc4c8601ec8c"
        assert fingerprint("foobar") == "fp85944171f73967e8"

    def test_format_is_fp_plus_16_lowercase_hex(self) -> None:
        fp = fingerprint("User publishes blog posts on Tuesday mornings")
        assert len(fp) == 18 and fp.startswith("fp")
        assert all(c in "0123456789abcdef" for c in fp[2:])

    def test_case_and_whitespace_do_not_change_the_id(self) -> None:
        assert fingerprint("User prefers  short   names") == fingerprint("user prefers short names")
        assert fingerprint("\tUser\u00a0prefers\nshort names ") == fingerprint(
            "user prefers short names"
        )

    def test_punctuation_and_accents_are_kept(self) -> None:
        assert fingerprint("café") != fingerprint("cafe")
        assert fingerprint("names.") != fingerprint("names")

    def test_separators_that_rust_does_not_treat_as_whitespace_are_kept(self) -> None:
        # U+001F is whitespace to Python's str.split() but not to Rust's is_whitespace.
        assert normalize("a\x1fb") == "a\x1fb"
        assert fingerprint("a\x1fb") != fingerprint("a b")

    def test_every_code_point_splits_exactly_like_rust_is_whitespace(self) -> None:
        rust = set("\t\n\v\f\r \u0085\u00a0\u1680\u2028\u2029\u202f\u205f\u3000")
        rust.update(chr(c) for c in range(0x2000, 0x200B))
        for code in range(0x110000):
            if 0xD800 <= code <= 0xDFFF:
                continue
            char = chr(code)
            assert (collapse_whitespace(f"a{char}b") == "a b") == (char in rust), hex(code)

    @pytest.mark.parametrize(
        ("text", "lowered"),
        [("ΟΔΟΣ", "οδος"), ("İstanbul", "i̇stanbul"), ("STRASSE ẞ", "strasse ß")],
    )
    def test_unicode_lowercase_matches_rust(self, text: str, lowered: str) -> None:
        assert normalize(text) == lowered
        assert fingerprint(text) == f"fp{_fnv1a64(lowered.encode()):016x}"

    @given(st.text())
    def test_fingerprint_is_fnv1a_of_the_normalized_text_at_every_length(self, text: str) -> None:
        # Four bytes a step, then the rest one by one: every length mod 4 and every UTF-8 width.
        for cut in range(4):
            shorter = text + "é日a"[:cut]
            expected = _fnv1a64(normalize(shorter).encode("utf-8", "surrogatepass"))
            assert fingerprint(shorter) == f"fp{expected:016x}"

    @given(st.text())
    def test_fingerprint_ignores_whitespace_runs(self, text: str) -> None:
        spaced = "  " + "   ".join(collapse_whitespace(text).split(" ")) + "\n"
        assert fingerprint(spaced) == fingerprint(text)

    @given(st.text(alphabet=string.printable))
    def test_fingerprint_ignores_ascii_case(self, text: str) -> None:
        assert fingerprint(text.swapcase()) == fingerprint(text)

    @given(st.lists(st.sampled_from(["A  b", "a b", "C\td", "ΟΔΟΣ  x", ""]), max_size=12))
    def test_normalize_answers_each_text_in_any_order_of_calls(self, texts: list[str]) -> None:
        # It keeps its last answer for the same object: equal texts, other objects, repeats and
        # interleavings each get their own text's form.
        for text in texts:
            copy = "".join(list(text))  # an equal string, another object (when not empty)
            expected = " ".join(text.split()).lower()
            assert normalize(text) == expected
            assert normalize(copy) == expected
            assert normalize(text) == expected

    def test_normalize_from_threads_meanwhile_answers_each_its_own(self) -> None:
        texts = [f"Text  {i}  HERE" for i in range(64)]

        def check(offset: int) -> bool:
            return all(
                normalize(texts[(i + offset) % 64]) == f"text {(i + offset) % 64} here"
                for i in range(2000)
            )

        with ThreadPoolExecutor(4) as pool:
            assert all(pool.map(check, range(4)))


class TestTokenizer:
    def test_splits_on_punctuation_and_lowercases(self) -> None:
        assert tokenize("Mike's blog-style") == ["mike", "s", "blog", "style"]

    def test_keeps_accented_words_whole(self) -> None:
        assert tokenize("Café rápido") == ["café", "rápido"]

    def test_cjk_gives_unigrams_and_bigrams(self) -> None:
        assert sorted(tokenize("日本語")) == sorted(["日", "日本", "本", "本語", "語"])

    def test_stopwords_in_english_and_portuguese_are_dropped(self) -> None:
        assert terms("What is the name of the dog") == ["name", "dog"]
        assert terms("Qual é o nome do cachorro") == ["nom", "cachorr"]

    def test_first_person_words_and_user_nouns_become_user(self) -> None:
        assert sorted(terms("what's my name?")) == ["name", "user"]
        assert sorted(terms("Eu moro em Lisboa")) == ["lisbo", "mor", "user"]
        assert sorted(terms("O usuário mora em Lisboa")) == ["lisbo", "mor", "user"]

    def test_id_im_and_ive_without_an_apostrophe_are_words_not_the_user(self) -> None:
        assert "user" not in terms("the session id of the IM chat")
        assert "user" not in terms("ive league")
        assert "user" in terms("I'm sure I've said it")

    def test_inflections_meet_at_one_stem(self) -> None:
        assert terms("publishes articles") == terms("publish article")
        assert terms("as publicações") == terms("para publicar")

    def test_accents_are_folded_so_unaccented_typing_matches(self) -> None:
        assert terms("ação e café") == terms("acao e cafe")

    def test_language_follows_the_texts_own_function_words(self) -> None:
        assert language(tokenize("the user lives in a flat")) == "en"
        assert language(tokenize("o usuário mora num apartamento")) == "pt"


@pytest.mark.parametrize(
    ("plural", "singular"),
    [("manhãs", "manhã"), ("limões", "limão"), ("corações", "coração"), ("maçãs", "maçã")],
)
def test_portuguese_nasal_plurals_meet_their_singulars(plural: str, singular: str) -> None:
    """Snowball's Portuguese stemmer leaves "manhãs" apart from "manhã" and "limões" ("limo")
    from "limão" ("lima"), where every regular plural meets its singular: a question in the
    singular ("corro de manhã") missed a memory in the plural ("corro todas as manhãs")."""
    assert terms(f"as {plural} dela") == terms(f"a {singular} dela")


@pytest.mark.parametrize(
    ("plural", "singular"),
    [("chás", "chá"), ("cafés", "café"), ("sofás", "sofá"), ("avós", "avó"), ("robôs", "robô")],
)
def test_portuguese_plurals_of_a_stressed_vowel_meet_their_singulars(
    plural: str, singular: str
) -> None:
    """Snowball's Portuguese stemmer drops a final stressed vowel ("café" → "caf") but leaves
    its plural whole ("cafés"): "Qual chá eu gosto?" missed "O usuário gosta de chás verdes"."""
    assert terms(f"as {plural} dela") == terms(f"a {singular} dela")


@pytest.mark.parametrize(
    ("plural", "singular"),
    [
        ("viagens", "viagem"),
        ("homens", "homem"),
        ("jardins", "jardim"),
        ("animais", "animal"),
        ("jornais", "jornal"),
        ("papéis", "papel"),
        ("hotéis", "hotel"),
        ("possíveis", "possível"),
        ("disponiveis", "disponivel"),
        ("museus", "museu"),
        ("chapéus", "chapéu"),
    ],
)
def test_portuguese_plurals_snowball_leaves_apart_meet_their_singulars(
    plural: str, singular: str
) -> None:
    """The plurals of "-m" ("-ns"), "-al", "-el", "-vel" and "-eu": "viagens" stemmed "viagens"
    and "viagem" "viag", so "minha viagem" missed "as viagens do usuário"."""
    assert terms(f"as {plural} dela") == terms(f"a {singular} dela")


def test_portuguese_singulars_in_s_keep_meeting_their_plurals() -> None:
    # "-ês" is a singular's ending (mês, inglês, três) and a three-letter word too often is
    # ("gás"): their plurals already meet them, and still do.
    for singular, plural in (
        ("mês", "meses"),
        ("inglês", "ingleses"),
        ("gás", "gases"),
        ("herói", "heróis"),
        ("bem", "bens"),
    ):
        assert terms(f"o {singular} dela") == terms(f"os {plural} dela")


@pytest.mark.parametrize(
    "text",
    ["it isn't working", "why doesn't it compile", "we didn't go", "they aren't", "let's go"],
)
def test_english_contractions_that_are_stopwords_leave_no_stray_half(text: str) -> None:
    """The tokenizer splits "isn't" into "isn" + "t": the stopword "isn't" never matched, and
    "isn" became a content term, so "it isn't working" recalled "The office isn't open"."""
    contracted = {"isn", "doesn", "didn", "aren", "let"}
    assert contracted.isdisjoint(terms(text))


def test_a_contraction_part_that_is_a_word_alone_stays_one() -> None:
    assert "won" in terms("the team won the cup") and "won" not in terms("it won't rain")
    assert "don" in terms("Don Draper") and "user" in terms("I'm here")


@pytest.mark.parametrize(
    ("plural", "singular"),
    [
        ("children", "child"),
        ("grandchildren", "grandchild"),
        ("women", "woman"),
        ("men", "man"),
        ("wives", "wife"),
        ("feet", "foot"),
        ("teeth", "tooth"),
        ("mice", "mouse"),
        ("people", "person"),
    ],
)
def test_english_irregular_plurals_meet_their_singulars(plural: str, singular: str) -> None:
    """Snowball stems by suffix: "children" stayed "children" and "child" "child", so "my
    children" missed "The user has one child, Tom" ("kids" / "kid" always met)."""
    assert terms(f"the {plural} of it") == terms(f"the {singular} of it")


def test_an_english_verb_in_s_is_no_irregular_plural() -> None:
    assert terms("the user lives in Lisbon") == terms("the user live in Lisbon")


@pytest.mark.parametrize("text", ["İstanbul.com", "İZMİR_OFFICE", "src/İstanbul/app.py"])
def test_a_compound_is_the_same_term_whatever_the_case_of_a_turkish_i(text: str) -> None:
    """The compound's whole is folded as its words are: "İ".lower() leaves a combining dot
    the words drop, and the compound kept it, cut there ("stanbul.com"), so a query typed in
    lower case never matched the identifier whole."""
    plain = text.replace("İ", "I").lower()
    assert terms(text) == terms(plain)


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        ("The user/customer prefers tea", 1),
        ("my/our team meets on Fridays", 1),
        ("see src/users/models.py for the user model", 1),
        ("get_user_by_id loads an account", 0),
        ("src/users/admin/views holds it", 0),
    ],
)
def test_a_slash_in_prose_still_speaks_of_the_user(text: str, mentions: int) -> None:
    """A compound holding "user" is a name in code (`user_id`, a path), no mention of the person;
    but one slash joins words in prose too: "The user/customer prefers tea" lost its `user`
    term, and with it every first-person question's match."""
    assert terms(text).count("user") == mentions
