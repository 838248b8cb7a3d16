"""Every metric against values worked out by hand (the working is in the comments)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rfteval.graders import metrics
from rfteval.graders.metrics import METRICS, bleu, fuzzy_match, gleu, meteor, rouge, word_tokens

HYP = "the cat sat on the mat"
REF = "the cat sat on a mat"


# --- fuzzy_match: 1 - indel_distance / (len1 + len2) -------------------------------------------------------

def test_fuzzy_match_kitten_sitting():
    # LCS("kitten", "sitting") = "ittn" (4); indel distance = 6 + 7 - 2*4 = 5; 1 - 5/13
    assert fuzzy_match("kitten", "sitting") == pytest.approx(8 / 13)


def test_fuzzy_match_sentence():
    # LCS = "the cat sat on " (15) + " mat" (4) = 19; distance = 22 + 20 - 38 = 4; 1 - 4/42
    assert fuzzy_match(HYP, REF) == pytest.approx(1 - 4 / 42)


def test_fuzzy_match_is_case_and_space_sensitive():
    # no preprocessing: "ABC" vs "abc" share nothing
    assert fuzzy_match("ABC", "abc") == 0.0
    # one extra space: distance 1 over 3 + 4 characters
    assert fuzzy_match("a b", "a  b") == pytest.approx(1 - 1 / 7)


def test_fuzzy_match_unicode_counts_code_points():
    # "café" vs "cafe": LCS "caf" (3); distance 4 + 4 - 6 = 2; 1 - 2/8
    assert fuzzy_match("café", "cafe") == pytest.approx(0.75)
    assert fuzzy_match("日本語", "日本語") == 1.0


# --- BLEU: geometric mean of clipped n-gram precisions (n = 1..4) times the brevity penalty -------------------

def test_bleu_sentence():
    # hyp 6 tokens, ref 6 tokens (BP = 1). Clipped matches: 1-grams 5/6 ("the" clipped to 1),
    # 2-grams 3/5 (the cat, cat sat, sat on), 3-grams 2/4, 4-grams 1/3.
    expected = (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert bleu(HYP, REF) == pytest.approx(expected)


def test_bleu_brevity_penalty():
    # hyp "the cat sat" (3) vs ref "the cat sat down" (4): all precisions 1 (effective order 3),
    # BP = exp(1 - 4/3)
    assert bleu("the cat sat", "the cat sat down") == pytest.approx(math.exp(1 - 4 / 3))


def test_bleu_is_case_sensitive_and_splits_punctuation():
    assert bleu("Hello, world!", "Hello , world !") == pytest.approx(1.0)  # 13a splits the punctuation
    assert bleu("hello", "Hello") == 0.0


# --- GLEU: min(precision, recall) over all 1..4-grams together --------------------------------------------

def test_gleu_sentence():
    # matches 5 + 3 + 2 + 1 = 11; hypothesis n-grams 6+5+4+3 = 18; reference n-grams 18
    assert gleu(HYP, REF) == pytest.approx(11 / 18)


def test_gleu_uses_recall_when_the_hypothesis_is_short():
    # hyp "a b" vs ref "a b c": matches 2 + 1 = 3; hyp n-grams 3, ref n-grams 3 + 2 + 1 = 6 -> min(1, 0.5)
    assert gleu("a b", "a b c") == pytest.approx(0.5)


# --- METEOR (exact + Porter stem, no WordNet), alpha 0.9, beta 3, gamma 0.5 ---------------------------------
# P = m/len(hyp), R = m/len(ref), F = P*R / (0.9*P + 0.1*R), penalty = 0.5 * (chunks/m)^3, score = F * (1 - pen)

def test_meteor_stem_match():
    # hyp [cats, sleeping, quietly], ref [the, cat, is, sleeping]
    # exact: sleeping (1->3); stem: cats->cat (0->1). m = 2, not adjacent in ref order -> 2 chunks.
    p, r = 2 / 3, 2 / 4
    f = p * r / (0.9 * p + 0.1 * r)
    assert meteor("cats sleeping quietly", "the cat is sleeping") == pytest.approx(f * (1 - 0.5 * (2 / 2) ** 3))
    assert meteor("cats sleeping quietly", "the cat is sleeping") == pytest.approx(10 / 39)


def test_meteor_repeated_words_follow_nltk_alignment():
    # nltk aligns each hypothesis word (from the end) to the last free reference position of the same word:
    # hyp the(0) cat(1) sat(2) on(3) the(4) mat(5); ref the(0) cat(1) sat(2) on(3) a(4) mat(5)
    # matches (1,1) (2,2) (3,3) (4,0) (5,5): m = 5, chunks 3; P = R = F = 5/6
    assert meteor(HYP, REF) == pytest.approx(5 / 6 * (1 - 0.5 * (3 / 5) ** 3))


def test_meteor_identical_short_strings_are_penalised():
    # identical n tokens: F = 1, one chunk, penalty 0.5 / n^3
    assert meteor("hello", "hello") == pytest.approx(0.5)
    assert meteor("a b c d", "a b c d") == pytest.approx(1 - 0.5 / 64)


def test_meteor_lowercases():
    assert meteor("Hello World", "hello world") == pytest.approx(1 - 0.5 / 8)


def test_meteor_has_no_wordnet_synonyms():
    # WordNet METEOR would match dog/hound; this variant only matches exact words and stems.
    assert meteor("dog", "hound") == 0.0
    assert meteor("running", "runs") == pytest.approx(0.5)  # Porter: run / run


def test_meteor_stub_wordnet_path_is_exercised():
    # The stub's synsets() is what nltk calls for the synonym stage; it must be called and return nothing.
    calls: list[str] = []

    class Spy(metrics._NoWordNet):
        def synsets(self, word, *args, **kwargs):
            calls.append(word)
            return []

    from nltk.translate.meteor_score import single_meteor_score

    assert single_meteor_score(["a", "b"], ["c"], wordnet=Spy()) == 0.0
    assert calls == ["c"]


# --- ROUGE F-measure (rouge_score, no stemming) --------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("rouge_1", 5 / 6),   # overlap 5 of 6 unigrams each side
    ("rouge_2", 3 / 5),
    ("rouge_3", 2 / 4),
    ("rouge_4", 1 / 3),
    ("rouge_5", 0.0),     # "the cat sat on the" vs "the cat sat on a": no common 5-gram
    ("rouge_l", 5 / 6),   # LCS "the cat sat on mat"
])
def test_rouge_sentence(name, expected):
    assert METRICS[name](HYP, REF) == pytest.approx(expected)


def test_rouge_precision_recall_asymmetry_is_an_f_measure():
    # hyp "a b" vs ref "a b c d": P = 1, R = 1/2, F = 2PR/(P+R) = 2/3
    assert METRICS["rouge_1"]("a b", "a b c d") == pytest.approx(2 / 3)


def test_rouge_no_stemming_and_lowercase():
    assert METRICS["rouge_1"]("cats", "cat") == 0.0
    assert METRICS["rouge_1"]("CAT", "cat") == 1.0


def test_rouge_drops_non_ascii():
    # rouge_score's tokenizer keeps [a-z0-9] only: "café" -> "caf"; Japanese has no tokens at all.
    assert rouge("rouge1", "café", "caf") == 1.0
    assert METRICS["rouge_1"]("日本", "中国") == 0.0   # no tokens: equal strings 1, else 0
    assert METRICS["rouge_1"]("日本", "日本") == 1.0


def test_short_strings_have_no_high_order_ngrams():
    assert METRICS["rouge_3"]("a b", "a b") == 0.0


# --- the shared edge-case rule: no tokens on a side -> 1 if the strings are equal, else 0 -------------------

@pytest.mark.parametrize("name", sorted(METRICS))
def test_empty_strings(name):
    fn = METRICS[name]
    assert fn("", "") == 1.0
    assert fn("", "some text") == 0.0
    assert fn("some text", "") == 0.0


@pytest.mark.parametrize("name", ["bleu", "gleu", "meteor", "rouge_1"])
def test_whitespace_only(name):
    assert METRICS[name]("   ", "   ") == 1.0
    assert METRICS[name](" ", "  ") == 0.0


def test_word_tokens_without_punkt():
    assert word_tokens("Hello, world. It's here!") == ["Hello", ",", "world.", "It", "'s", "here", "!"]


def test_metric_set_matches_openai_enum():
    assert set(metrics.ALL_METRICS) == {"cosine", "fuzzy_match", "bleu", "gleu", "meteor", "rouge_1", "rouge_2",
                                        "rouge_3", "rouge_4", "rouge_5", "rouge_l"}


# --- properties -------------------------------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
WORDS = st.lists(st.sampled_from(["the", "cat", "sat", "on", "a", "mat", "Cats", "running", "ran", "é", "日本"]),
                 max_size=12).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(METRICS)), st.one_of(TEXT, WORDS), st.one_of(TEXT, WORDS))
def test_every_metric_is_in_unit_range(name, a, b):
    value = METRICS[name](a, b)
    assert isinstance(value, float)
    assert 0.0 <= value <= 1.0


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["fuzzy_match", "bleu", "gleu", "rouge_1", "rouge_l"]), st.one_of(TEXT, WORDS))
def test_identical_strings_score_one(name, a):
    assert METRICS[name](a, a) == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(WORDS)
def test_identical_rouge_n_scores_one_when_long_enough(a):
    n_tokens = sum(w.isascii() for w in a.split())  # "é" and "日本" have no rouge tokens
    for n in range(1, 6):
        value = METRICS[f"rouge_{n}"](a, a)
        if n_tokens >= n or a == "":
            assert value == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(TEXT, TEXT)
def test_fuzzy_match_is_symmetric(a, b):
    assert fuzzy_match(a, b) == pytest.approx(fuzzy_match(b, a))
