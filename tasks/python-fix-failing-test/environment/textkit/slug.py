"""URL slugs."""
import re
import unicodedata


def slugify(text: str, max_length: int | None = None) -> str:
    """Turn text into a URL slug.

    - Accented letters become their plain ASCII letter (``"Crème brûlée"`` -> ``"creme-brulee"``);
      other non-ASCII characters are dropped.
    - The result is lower case and contains only ``a-z``, ``0-9`` and single hyphens: every run of
      other characters (spaces, punctuation, underscores) becomes one hyphen.
    - There is never a hyphen at the start or the end.
    - With ``max_length``, the slug is cut to at most that many characters, and a hyphen left at the
      end by the cut is removed.
    """
    text = unicodedata.normalize("NFKD", text)
    text = text.lower()
    slug = re.sub(r"[^a-z0-9]", "-", text)
    if max_length is not None:
        slug = slug[:max_length]
    return slug
