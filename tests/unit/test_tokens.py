"""Token counts from the shipped tokenizer or a configured tokenizer.json."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.text import tokens
from app.text.tokens import TokenizerError, count_many, count_tokens, load_tokenizer


def test_every_cjk_character_counts() -> None:
    text = "我们今天去公园散步吧天气很好"
    assert count_tokens(text) >= len(text)


def test_a_long_compound_is_several_pieces() -> None:
    assert count_tokens("Donaudampfschifffahrtsgesellschaftskapitän") > 5


def test_no_special_tokens_are_added() -> None:
    assert count_tokens("") == 0
    assert count_tokens("hello") == 1


def test_count_many_matches_count_tokens() -> None:
    texts = ["a b c", "Grüße aus München!", "", "数据库"]
    assert count_many(texts) == [count_tokens(t) for t in texts]


@given(st.text(max_size=300), st.integers(min_value=0, max_value=60))
def test_truncation_is_a_prefix_within_the_budget(text: str, budget: int) -> None:
    cut = tokens.truncate_to_tokens(text, budget)
    assert text.startswith(cut)
    assert count_tokens(cut) <= budget
    if count_tokens(text) <= budget:
        assert cut == text


@given(st.text(max_size=300), st.integers(min_value=0, max_value=60))
def test_fitting_is_truncating_with_the_count(text: str, budget: int) -> None:
    fitted, counted = tokens.fit_to_tokens(text, budget)
    assert fitted == tokens.truncate_to_tokens(text, budget)
    assert counted == count_tokens(fitted) <= budget


def test_a_model_familys_tokenizer_file_can_be_configured(tmp_path: Path) -> None:
    copy = tmp_path / "tokenizer.json"
    shutil.copy(tokens._SHIPPED_PATH, copy)
    assert load_tokenizer(str(copy)).encode("hello world").ids


def test_a_missing_tokenizer_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="ENGRAM_TOKENIZER"):
        load_tokenizer(str(tmp_path / "nope.json"))


def _tokenizer_count(text: str) -> int:
    return len(load_tokenizer().encode(text, add_special_tokens=False).ids)


ASCII_PIECES = st.sampled_from(
    ["hello", "World", "unaffable", "9:30", "e-mail", "don't", "##ing", "[MASK]", "[mask]",
     "[MA\x01SK]", "[UNK]", "CLS", "x" * 101, "a" * 64, "\t", "\n", "\r", "\x0b", "\x1c",
     "\x00", "\x7f", " "]
)  # fmt: skip


@given(st.lists(ASCII_PIECES | st.text(st.characters(max_codepoint=127), max_size=8)))
def test_ascii_text_counts_what_the_tokenizer_counts(pieces: list[str]) -> None:
    """ASCII text is counted by the chunk from a cache: the count must stay the tokenizer's."""
    texts = ["".join(pieces), " ".join(pieces), "".join(reversed(pieces))]
    assert count_many(texts) == [_tokenizer_count(t) for t in texts]
    assert count_tokens(texts[0]) == _tokenizer_count(texts[0])


def test_a_full_cache_starts_afresh_and_counts_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "KEPT", 8)
    texts = [f"word{n} and word{n % 3}, said user-{n}." for n in range(50)] + ["y" * 80]
    assert count_many(texts) == [_tokenizer_count(t) for t in texts]
    assert count_many(texts) == [_tokenizer_count(t) for t in texts]


@given(
    st.lists(
        ASCII_PIECES
        | st.sampled_from([*tokens.TYPOGRAPHIC, "\u00a0", "I\u2019ve", "\u201cok\u201d", "\u00e9"])
        | st.text(st.characters(max_codepoint=127), max_size=8)
    )
)
def test_typographic_punctuation_counts_what_the_tokenizer_counts(pieces: list[str]) -> None:
    """Curly quotes, dashes and the like take the cached path as ASCII marks: same count."""
    texts = ["".join(pieces), " ".join(pieces)]
    assert count_many(texts) == [_tokenizer_count(t) for t in texts]


@given(
    st.lists(
        ASCII_PIECES
        | st.text(max_size=8)
        | st.sampled_from(
            ["\U0001f642", "caf\u00e9", "\u65e5\u672c\u8a9e", "\u2003", "\u0085", "\u200b",
             " \u0301", "\u0130", "\u00df", "\u2028", "\uff1c", "\u00a0"]
        )
    )
)  # fmt: skip
def test_any_text_counts_what_the_tokenizer_counts(pieces: list[str]) -> None:
    """Emoji, accents, CJK, odd spaces and controls: a text with other characters than
    ASCII is still counted by the chunk, and the count must stay the tokenizer's."""
    texts = ["".join(pieces), " ".join(pieces), "\n".join(reversed(pieces))]
    assert count_many(texts) == [_tokenizer_count(t) for t in texts]


@given(st.text(max_size=200), st.integers(min_value=0, max_value=40))
def test_words_within_is_the_longest_run_of_whole_words_within_the_budget(
    text: str, budget: int
) -> None:
    head = tokens.words_within(text, budget)
    words = text.split()
    if head is None:
        assert not words or count_tokens(words[0]) > budget
        return
    kept = head.split()
    assert text.startswith(head) and kept == words[: len(kept)]
    assert count_tokens(head) <= budget
    if len(kept) < len(words):
        assert count_tokens(" ".join(words[: len(kept) + 1])) > budget
