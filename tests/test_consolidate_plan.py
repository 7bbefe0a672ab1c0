"""The consolidation plan with values: normal forms, the guards of the semantic tier, survivors,
pinned members, and the LLM tier's reply reading."""

from __future__ import annotations

import json

import pytest

from memory_worker.consolidate.judge import LEARNED_HEADER, Verdict, merge_learned, parse_reply
from memory_worker.consolidate.plan import Row, Tier, plan_exact, plan_semantic, reason
from memory_worker.consolidate.text import disagreement, names, normalize, reorder_key


def row(memory_id: str, text: str, **fields: object) -> Row:
    return Row(id=memory_id, text=text, **fields)  # type: ignore[arg-type]


class TestNormalize:
    """The exact tier's key drops case, spacing and sentence punctuation, and nothing else."""

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("The user lives in Porto.", "the user lives in porto"),
            ("The user lives in  Porto!", "The user lives in Porto"),
            ("Ana's dog is Rex.", "ana's dog is rex"),
            ("O usuário mora em São Paulo.", "o usuário mora em são paulo"),
            ("Weighs 3.5 kg", "weighs 3.5kg"),
            ("The freezer is at −18 °C.", "The freezer is at -18 °C."),
            ("The freezer is at –18 °C.", "The freezer is at -18 °C."),
            ("Open 9–17, Porto–Braga.", "Open 9-17, Porto-Braga."),  # a dash between stays one
            ("The user ❤️ sushi", "the user ❤ sushi."),
            ("Run `make gen` after editing protos.", "run make gen after editing protos"),
        ],
    )
    def test_equal(self, a: str, b: str) -> None:
        assert normalize(a) == normalize(b)

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("The user codes in C++.", "The user codes in C."),
            ("The user codes in C#.", "The user codes in C."),
            ("The freezer is at -18 degrees.", "The freezer is at 18 degrees."),
            ("The rent is $900.", "The rent is €900."),
            ("The dose is 3.5 mg.", "The dose is 35 mg."),
            ("The user wakes at 6:30.", "The user wakes at 630."),
            ("A avó do usuário mora em Braga.", "O avô do usuário mora em Braga."),
            ("O usuário é médico.", "O usuário e médico."),
            # Comparisons and the typographic minus carry the fact as much as a digit does.
            ("Keep the p99 latency < 200 ms.", "Keep the p99 latency > 200 ms."),
            ("The user's budget is ≤ 500 euros.", "The user's budget is ≥ 500 euros."),
            ("In this repo x != y.", "In this repo x = y."),
            ("The freezer is at −18 °C.", "The freezer is at 18 °C."),
            # A dash typed as the minus (an en dash, as word processors and many style guides
            # write it) is a sign too: it was dropped as punctuation, `–18` read as `18`.
            ("The freezer is at –18 °C.", "The freezer is at 18 °C."),
            ("The account is at ‒200 euros.", "The account is at 200 euros."),
            ("The tolerance is ~5%.", "The tolerance is 5%."),
            # Symbols are facts too, and a word keeps its combining marks (Devanagari, Thai).
            ("The user rated the hotel ★★★★★.", "The user rated the hotel ★."),
            ("The migration test passes ✓", "The migration test passes ✗"),
            ("The user's favourite emoji is 🎉", "The user's favourite emoji is 🔥"),
            ("उपयोगकर्ता का नाम किरण है", "उपयोगकर्ता का नाम करण है"),
            ("ผู้ใช้ชอบกาแฟ", "ผู้ใช้ชอบกาเฟ"),
        ],
    )
    def test_different(self, a: str, b: str) -> None:
        assert normalize(a) != normalize(b)

    def test_a_reorder_has_the_same_bag_and_another_normal_form(self) -> None:
        a, b = "Ana manages Bruno.", "Bruno manages Ana."
        assert reorder_key(a) == reorder_key(b) and normalize(a) != normalize(b)


class TestGuards:
    """`disagreement()` stops a merge whenever something load-bearing differs."""

    @pytest.mark.parametrize(
        ("a", "b", "why"),
        [
            ("Ana manages Bruno.", "Bruno manages Ana.", "names in another order"),
            ("The user loves cilantro.", "The user hates cilantro.", "one word differs"),
            ("The user lives in Porto.", "The user lives in Porto now.", "one word differs"),
            ("The user has 2 cats and a dog.", "The user has 3 cats and one dog.", "numbers"),
            ("The user flies to Rome on May 3.", "The user flies to Rome on June 3.", "one word"),
            (
                "The user met Ana at the gym on Monday.",
                "The user met Ana at the gym on Friday.",
                "one word",
            ),
            (
                "The standup is every Monday at nine.",
                "Standups happen each Tuesday at nine.",
                "dates",
            ),
            (
                "The user does not drink coffee at the office.",
                "The user drinks coffee at the office, happily.",
                "negations",
            ),
            (
                "The user likes rainy weather a lot.",
                "The user really dislikes rainy weather.",
                "polarity",
            ),
            (
                "Ana lent the user her car last week.",
                "The user lent Ana the car last week.",
                "shared words in another order",
            ),
            ("O usuário não gosta de café.", "O usuário gosta muito de café.", "negations"),
            (
                "The user is allergic to eggs.",
                "The user is allergic to milk and eggs.",
                "says more",
            ),
            ("The user used to live in Madrid.", "The user lives in Madrid.", "tense words"),
            # A wish or an attempt is not the deed.
            ("The user wants to learn Rust.", "The user learned Rust.", "tense words"),
            ("The user hopes to run a marathon.", "The user ran a marathon.", "tense words"),
            ("O usuário quer aprender piano.", "O usuário aprendeu piano.", "tense words"),
            ("The user might move to Porto.", "The user moved to Porto.", "tense words"),
            ("O usuário talvez se mude para o Porto.", "O usuário se mudou para o Porto.", "tense"),
            (
                "The user has a lot of experience with Kubernetes.",
                "The user has little experience with Kubernetes.",
                "polarity words",
            ),
            ("A avó do usuário é costureira.", "O avô do usuário é costureiro.", "family words"),
            ("O usuário entrou na empresa em 2022.", "O usuário saiu da empresa em 2022.", "polar"),
        ],
    )
    def test_blocks(self, a: str, b: str, why: str) -> None:
        found = disagreement(a, b)
        assert found is not None and why in found, found

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            ("The user lives in Porto now.", "The user currently lives in Porto."),
            ("The user works as a nurse in Lisbon.", "The user is a nurse working in Lisbon."),
        ],
    )
    def test_lets_a_restatement_through(self, a: str, b: str) -> None:
        assert disagreement(a, b) is None

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            # Both pairs embed at cosine ≥ 0.92 with the default embedder (0.943, 0.919).
            ("The user is allergic to peanuts", "User has a penicillin allergy"),
            ("The user email is alice@acme.com", "User email: bob@acme.com"),
        ],
    )
    def test_blocks_a_reworded_correction(self, a: str, b: str) -> None:
        found = disagreement(a, b)
        assert found is not None and "different words" in found, found

    def test_lets_a_reworded_restatement_through(self) -> None:
        assert (
            disagreement("The user is allergic to peanuts", "The user has a peanut allergy") is None
        )

    def test_a_restatement_in_another_order_is_still_stopped(self) -> None:
        found = disagreement("Pipoca is the user's dog.", "The user's dog is Pipoca.")
        assert found == "shared words in another order"

    def test_names_skip_common_words_opening_a_sentence(self) -> None:
        assert names("The user met Ana. User likes Lisbon. O Rui mora em Braga.") == [
            "ana", "lisbon", "rui", "braga",
        ]  # fmt: skip


class TestExactPlan:
    def test_exact_duplicates_merge_into_the_most_corroborated(self) -> None:
        rows = [
            row("a", "The user lives in Porto.", created_at=1),
            row("b", "the user lives in porto", corroboration=2, created_at=5),
            row("c", "The user lives in Porto!", created_at=3),
        ]
        [group] = plan_exact(rows)
        assert group.tier is Tier.EXACT and group.writable
        assert group.winner.id == "b" and [r.id for r in group.losers] == ["a", "c"]

    def test_survivor_order_pinned_then_corroborated_then_oldest_then_id(self) -> None:
        rows = [
            row("d", "Tea, please.", corroboration=9, created_at=1),
            row("c", "tea please", pinned=True, created_at=9),
            row("b", "Tea please!", corroboration=9, created_at=1),
            row("a", "TEA. PLEASE.", corroboration=9, created_at=2),
        ]
        [group] = plan_exact(rows)
        assert [m.id for m in (group.winner, *group.losers)] == ["c", "b", "d", "a"]

    def test_a_pinned_loser_is_skipped_never_retired(self) -> None:
        rows = [
            row("a", "The user is vegan.", pinned=True, corroboration=3),
            row("b", "the user is vegan", pinned=True),
            row("c", "The user is vegan!"),
        ]
        [group] = plan_exact(rows)
        assert group.winner.id == "a"
        assert [r.id for r in group.losers] == ["c"]
        assert [r.id for r in group.skipped_pinned] == ["b"]

    def test_reorders_are_report_only_and_one_differing_word_is_nothing(self) -> None:
        rows = [
            row("a", "Ana manages Bruno."),
            row("b", "Bruno manages Ana."),
            row("c", "The user lives in Porto."),
            row("d", "The user lives in Braga."),
        ]
        [group] = plan_exact(rows)
        assert group.tier is Tier.REORDER and not group.writable
        assert {group.winner.id, *(r.id for r in group.losers)} == {"a", "b"}

    def test_the_plan_is_the_same_for_any_input_order(self) -> None:
        rows = [row(str(i), f"Fact number {i % 3}.", created_at=i) for i in range(9)]
        assert plan_exact(rows) == plan_exact(list(reversed(rows)))

    def test_the_reason_names_the_rule(self) -> None:
        [group] = plan_exact([row("a", "Tea."), row("b", "tea")])
        assert reason(group).startswith("memory-consolidate: exact duplicate")


class TestSemanticPlan:
    def test_a_close_pair_that_agrees_is_writable(self) -> None:
        rows = [
            row("a", "The user lives in Porto now."),
            row("b", "The user currently lives in Porto.", corroboration=1),
        ]
        [group] = plan_semantic(rows, {"a": {"b": 0.95}, "b": {"a": 0.95}}, 0.92)
        assert group.writable and group.winner.id == "b" and group.score == 0.95

    def test_below_the_threshold_nothing_is_proposed(self) -> None:
        rows = [row("a", "The user lives in Porto now."), row("b", "The user lives in Porto.")]
        assert plan_semantic(rows, {"a": {"b": 0.91}}, 0.92) == []

    def test_a_close_pair_with_another_number_is_report_only(self) -> None:
        rows = [row("a", "The user runs 5 km daily."), row("b", "Every day the user runs 10 km.")]
        [group] = plan_semantic(rows, {"a": {"b": 0.97}}, 0.92)
        assert not group.writable and "numbers" in group.why

    def test_a_sign_typed_as_an_en_dash_is_never_merged_away(self) -> None:
        """Both tiers read the same tokens: a minus typed as `–` was no sign to either, so a
        freezer at –18 °C and one at 18 °C merged as exact duplicates (and, close as they
        embed, as an agreeing semantic pair)."""
        rows = [row("a", "The freezer is at –18 °C."), row("b", "The freezer is at 18 °C.")]
        assert plan_exact(rows) == []
        [group] = plan_semantic(rows, {"a": {"b": 0.99}}, 0.92)
        assert not group.writable

    def test_a_chain_whose_ends_are_not_close_is_report_only(self) -> None:
        rows = [
            row("a", "The user lives in Porto now."),
            row("b", "The user currently lives in Porto."),
            row("c", "Currently, the user is living in Porto."),
        ]
        neighbours = {"a": {"b": 0.95}, "b": {"c": 0.94}}
        [group] = plan_semantic(rows, neighbours, 0.92)
        assert not group.writable and "not every pair" in group.why

    def test_a_group_is_judgeable_only_when_no_pair_of_it_holds_two_facts(self) -> None:
        """The LLM tier is offered reorders and pairs not close enough, never a group where a
        guard found another number in any pair: a reorder found first, or a missing cosine,
        offered the whole group, and a merge retired the correction with it."""
        reorder_first = [
            row("a", "Ana and Bruno share an office."),
            row("b", "Bruno and Ana share an office."),
            row("c", "Ana and Bruno share an office since 2019."),
        ]
        close = {"a": {"b": 0.97, "c": 0.95}, "b": {"c": 0.95}}
        [group] = plan_semantic(reorder_first, close, 0.92)
        assert not group.writable and not group.judgeable
        chain = [
            row("a", "The user runs 5 km daily."),
            row("b", "The user runs daily."),
            row("c", "Every day the user runs 10 km."),
        ]
        [group] = plan_semantic(chain, {"a": {"b": 0.95}, "b": {"c": 0.94}}, 0.92)
        assert "not every pair" in group.why and not group.judgeable
        reorders = [
            row("a", "Ana and Bruno share an office."),
            row("b", "Bruno and Ana share an office."),
        ]
        [group] = plan_semantic(reorders, {"a": {"b": 0.97}}, 0.92)
        assert group.judgeable
        chain_ok = [
            row("a", "The user lives in Porto now."),
            row("b", "The user currently lives in Porto."),
            row("c", "The user is living in Porto now."),
        ]
        [group] = plan_semantic(chain_ok, {"a": {"b": 0.95}, "b": {"c": 0.94}}, 0.92)
        assert group.judgeable


class TestJudge:
    def test_a_reply_is_accepted_only_for_what_was_offered(self) -> None:
        reply = 'Sure: {"merge_groups": [0, 3, 0, "1"], "promotions": [{"id": "m1", "rule": '
        reply += '"Answer in Portuguese."}, {"id": "zz", "rule": "Be rude."}]} done'
        verdict = parse_reply(reply, offered_groups=2, offered_ids={"m1"})
        assert verdict.merge_groups == (0,)
        assert verdict.promotions == (("m1", "Answer in Portuguese."),)
        assert verdict.ignored == 4

    @pytest.mark.parametrize(
        "reply", ["no json here", '{"merge_groups": 3}', "[1, 2]", '{"promotions": {"id": 1}}']
    )
    def test_a_reply_of_the_wrong_shape_fails_whole(self, reply: str) -> None:
        with pytest.raises(ValueError):
            parse_reply(reply, offered_groups=2, offered_ids=set())

    @pytest.mark.parametrize(
        "item",
        [{"id": ["m1"], "rule": "Answer in Portuguese."}, {"id": {"m1": 1}, "rule": "Be brief."}],
    )
    def test_an_id_that_is_no_string_is_ignored_not_a_crash(self, item: object) -> None:
        """A model naming an id as a list or an object (malformed, or injected by a memory's
        text) was looked up in the offered set: `TypeError: unhashable type`, which no caller
        catches, ended the whole pass (every bank after this one unconsolidated, no report)."""
        reply = json.dumps({"merge_groups": [[0], {"i": 1}], "promotions": [item]})
        verdict = parse_reply(reply, offered_groups=2, offered_ids={"m1"})
        assert verdict == Verdict((), (), 3)

    def test_an_offered_id_is_promoted_once(self) -> None:
        """A promotion was accepted for every item naming an offered id, however many named the
        same one: a reply (a looping model, or one steered by a memory's own text) turned one
        memory into thousands of lines of the `learned` rule, which reaches every conversation
        of the bank. The first rule given for an id is kept; the others are ignored."""
        items = [{"id": "m1", "rule": f"Answer in Portuguese, variant {i}."} for i in range(500)]
        items.append({"id": "m2", "rule": "Be brief."})
        verdict = parse_reply(json.dumps({"promotions": items}), 0, offered_ids={"m1", "m2"})
        assert verdict.promotions == (
            ("m1", "Answer in Portuguese, variant 0."),
            ("m2", "Be brief."),
        )
        assert verdict.ignored == 499

    def test_promotions_are_appended_once(self) -> None:
        merged, added = merge_learned("", ["Answer in Portuguese.", "answer in portuguese"])
        assert added == 1 and merged == LEARNED_HEADER + "- Answer in Portuguese.\n"
        again, none = merge_learned(merged or "", ["Answer in Portuguese!"])
        assert again is None and none == 0
