from textkit import slugify


def test_simple_words():
    assert slugify("Hello World") == "hello-world"


def test_punctuation_collapses():
    assert slugify("Hello, World!") == "hello-world"


def test_accents():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_max_length():
    assert slugify("The quick brown fox", max_length=10) == "the-quick"
