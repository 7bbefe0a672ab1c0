"""The injected text, pinned: section, message, budgets, floor, dedup, the rules update."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_worker.core import transitions
from memory_worker.core.injection import (
    apply_floor,
    carried_texts,
    render_memories,
    render_rules_update,
    render_section,
)
from memory_worker.core.models import Hit, Memory, Rule

from .goldens import updating

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "injection"
DAY_MS = 86_400_000
NOW = 1_793_491_200_000  # 2026-11-01


def _memory(text: str, days_ago: float = 0, **changes: object) -> Memory:
    stamp = NOW - int(days_ago * DAY_MS)
    memory = transitions.new_memory(f"fp{abs(hash(text)) % 16**16:016x}", text, now_ms=stamp)
    return memory.model_copy(update=changes)


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if updating("injection"):
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, (
        f"{name} changed; review the diff and re-baseline with UPDATE_GOLDENS=injection"
    )


RULES = [
    Rule(name="style", content="# Style\nFormal register. No em-dashes.\n", updated_at=1),
    Rule(name="blog", content="Posts go out on Tuesdays.", updated_at=1),
]


class TestSection:
    def test_section_text_is_pinned(self) -> None:
        section = render_section("main", RULES, max_rule_chars=6000)
        _check_golden("section.txt", section.text)
        assert (section.rules, section.truncated) == (2, False)

    def test_ambient_header_is_present_without_rules(self) -> None:
        section = render_section("blog", [], max_rule_chars=6000)
        assert section.text.startswith("\n\n# Memory — bank: blog\n")
        assert "saved without any tool call" in section.text
        assert (section.rules, section.truncated) == (0, False)

    def test_the_header_speaks_of_rules_below_only_when_a_rule_follows(self) -> None:
        sentence = "Treat the rules below as standing instructions."
        assert sentence in render_section("main", RULES, max_rule_chars=6000).text
        for rules in ([], [Rule(name="empty", content="  \n", updated_at=1)]):
            text = render_section("main", rules, max_rule_chars=6000).text
            assert sentence not in text and text.endswith("without any tool call.\n")
        omitted = render_section("main", [Rule(name="big", content="x" * 50, updated_at=1)], 10)
        assert omitted.rules == 0 and sentence not in omitted.text

    def test_rules_come_in_name_order(self) -> None:
        text = render_section("main", RULES, max_rule_chars=6000).text
        assert text.index("## blog") < text.index("## style")

    def test_the_learned_rule_comes_after_every_hand_written_one(self) -> None:
        """Extraction only ever appends to `learned`: in name order it would use up the budget
        of the rules a person wrote after it ("style", "tone"), which were then omitted."""
        learned = Rule(name="learned", content="- Use metric units.\n" * 400, updated_at=1)
        text = render_section("main", [*RULES, learned], max_rule_chars=6000).text
        assert text.index("## blog") < text.index("## style") < text.index("## learned")
        assert "Formal register" in text and "[rule truncated" in text

    def test_a_rule_over_budget_is_cut_visibly_and_later_ones_omitted(self) -> None:
        rules = [
            Rule(name="a", content="x" * 100, updated_at=1),
            Rule(name="b", content="é" * 500, updated_at=1),
            Rule(name="c", content="short", updated_at=1),
        ]
        section = render_section("main", rules, max_rule_chars=400)
        assert section.truncated and section.rules == 2
        assert "\n## b\n" + "é" * 300 + "\n[rule truncated: over the 400 char" in section.text
        assert "## c [omitted: over the injection budget]" in section.text

    def test_budget_counts_characters_not_bytes(self) -> None:
        rules = [Rule(name="pt", content="ç" * 300, updated_at=1)]
        section = render_section("main", rules, max_rule_chars=300)
        assert not section.truncated and "ç" * 300 in section.text

    def test_with_little_budget_left_a_rule_is_omitted_not_cut(self) -> None:
        rules = [
            Rule(name="a", content="x" * 250, updated_at=1),
            Rule(name="b", content="y" * 400, updated_at=1),
        ]
        section = render_section("main", rules, max_rule_chars=400)
        assert "## b [omitted: over the injection budget]" in section.text
        assert "yyyy" not in section.text

    def test_rules_update_message_is_pinned(self) -> None:
        section = render_section("main", RULES, max_rule_chars=6000)
        update = render_rules_update(section.text)
        _check_golden("rules-update.txt", update)
        assert update == render_rules_update(section.text)  # deterministic


class TestMemoryMessage:
    def _hits(self) -> list[Hit]:
        return [
            Hit(_memory("User publishes blog posts on Tuesday mornings", days_ago=3), 4.2),
            Hit(_memory("The user's dog is called Pipoca", days_ago=40), 2.1),
        ]

    def test_message_text_is_pinned(self) -> None:
        block = render_memories("main", self._hits(), budget_tokens=1200, now_ms=NOW)
        assert block.message is not None
        _check_golden("memories.txt", block.message)
        assert block.message.startswith('<memory bank="main" recalled="2026-11-01">')
        assert "- [2026-10-29] User publishes blog posts on Tuesday mornings" in block.message

    @pytest.mark.usefixtures("local_zone")
    def test_days_are_the_persons_own_not_greenwichs(self) -> None:
        """At 22:30 in São Paulo (01:30 UTC the next day) the block was dated tomorrow, and so was
        a memory saved that evening: the agent, told today's date by its harness, saw a memory
        from the future. Days are the worker's local zone's (`TZ`)."""
        evening = NOW + 90 * 60_000  # 2026-11-01 01:30 UTC, 2026-10-31 22:30 at UTC-3
        hits = [Hit(_memory("The user went to the dentist", days_ago=-90 / 1440), 1.0)]
        block = render_memories("main", hits, budget_tokens=1200, now_ms=evening)
        assert block.message is not None
        assert block.message.startswith('<memory bank="main" recalled="2026-10-31">')
        assert "- [2026-10-31] The user went to the dentist" in block.message

    def test_packing_skips_a_memory_too_large_and_keeps_smaller_ones(self) -> None:
        hits = [Hit(_memory("big " * 100), 3.0), Hit(_memory("small fact here"), 2.0)]
        block = render_memories("main", hits, budget_tokens=20, now_ms=NOW)
        assert [h.memory.text for h in block.included] == ["small fact here"]

    def test_the_budget_counts_what_cjk_and_emoji_cost_not_their_characters(self) -> None:
        """A token is about four ASCII characters but one CJK character or less than one emoji:
        counted by characters, a Chinese or emoji-laden bank was handed four times its budget."""
        ascii_text = "x" * 300
        cjk = "用户每周二早上发布博客文章" * 23  # 299 characters, about as many tokens
        emoji = "🎉" * 299
        for text in (cjk, emoji):
            block = render_memories("main", [Hit(_memory(text), 1.0)], 100, NOW)
            assert block.included == [], text[:3]
        block = render_memories("main", [Hit(_memory(ascii_text), 1.0)], 100, NOW)
        assert [h.memory.text for h in block.included] == [ascii_text]

    def test_nothing_fits_means_no_message(self) -> None:
        block = render_memories("main", self._hits(), budget_tokens=1, now_ms=NOW)
        assert block.message is None and block.included == []

    def test_memories_the_window_already_carries_are_not_repeated(self) -> None:
        earlier = render_memories("main", self._hits()[:1], budget_tokens=1200, now_ms=NOW)
        window = [
            {"role": "user", "content": [{"type": "text", "text": earlier.message}]},
            {"role": "assistant", "content": "Noted."},
        ]
        carried = carried_texts(window)
        block = render_memories("main", self._hits(), 1200, NOW, carried=carried)
        assert [h.memory.text for h in block.included] == ["The user's dog is called Pipoca"]

    def test_a_memory_that_mentions_the_closing_tag_is_still_carried_with_the_rest(self) -> None:
        hits = [
            Hit(_memory("Injected context is wrapped in <memory> and closed by </memory>."), 2.0),
            Hit(_memory("The user deploys on Fridays."), 1.0),
        ]
        earlier = render_memories("main", hits, budget_tokens=1200, now_ms=NOW)
        carried = carried_texts([{"role": "user", "content": earlier.message}])
        assert render_memories("main", hits, 1200, NOW, carried=carried).included == []

    def test_a_multiline_memory_renders_on_one_line(self) -> None:
        block = render_memories("main", [Hit(_memory("line one\nline two"), 1.0)], 1200, NOW)
        assert block.message is not None and "- [2026-11-01] line one line two\n" in block.message


class TestFloor:
    def test_floor_pads_with_standing_memories_at_score_zero(self) -> None:
        hit = Hit(_memory("recalled"), 2.0)
        top = [_memory("recalled"), _memory("pinned fact", pinned=True), _memory("third")]
        top = [hit.memory, *top[1:]]
        padded = apply_floor([hit], top, floor=3)
        assert [h.score for h in padded] == [2.0, 0.0, 0.0]
        assert [h.memory.text for h in padded] == ["recalled", "pinned fact", "third"]

    @pytest.mark.parametrize("floor", [0, 1])
    def test_floor_never_removes_hits(self, floor: int) -> None:
        hits = [Hit(_memory("a fact"), 1.0), Hit(_memory("b fact"), 0.5)]
        assert apply_floor(hits, [], floor=floor) == hits


def test_the_header_promises_capture_only_where_turns_are_captured() -> None:
    """Extraction off, or no model to extract with: "saved without any tool call" lost every
    "remember this"; the agent is told to save it itself, or to say it was not saved."""
    kept = render_section("main", RULES, max_rule_chars=6000).text
    assert "saved without any tool call" in kept
    told = render_section("main", RULES, max_rule_chars=6000, captured=False).text
    assert "saved without any tool call" not in told
    assert "Nothing is captured automatically here" in told and "memory::save" in told
    assert "Treat the rules below as standing instructions." in told
