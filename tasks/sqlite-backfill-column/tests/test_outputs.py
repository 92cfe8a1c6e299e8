"""books.author_name exists as TEXT and matches the join; rows and other columns are untouched."""
import hashlib
import sqlite3

DB = "/app/library.db"


def connect():
    return sqlite3.connect(f"file:{DB}?mode=ro", uri=True)


def test_column_added():
    with connect() as con:
        cols = {row[1]: row[2].upper() for row in con.execute("PRAGMA table_info(books)")}
    assert cols.get("author_name") == "TEXT"
    assert set(cols) == {"id", "title", "author_id", "year", "author_name"}


def test_values_backfilled():
    with connect() as con:
        authors = dict(con.execute("SELECT id, name FROM authors"))
        rows = con.execute("SELECT id, author_id, author_name FROM books ORDER BY id").fetchall()
    assert len(rows) == 40
    assert len(authors) == 8
    for book_id, author_id, author_name in rows:
        assert author_name == authors.get(author_id), f"book {book_id}"
    assert sum(1 for r in rows if r[2] is None) == 4


def test_original_data_unchanged():
    with connect() as con:
        books = con.execute("SELECT id, title, author_id, year FROM books ORDER BY id").fetchall()
        authors = con.execute("SELECT id, name, country FROM authors ORDER BY id").fetchall()
    digest = hashlib.sha256(repr((books, authors)).encode()).hexdigest()
    assert digest == "ccf4c2260332673d3b1b26726dbfe927b7ff5262a6c2213c59c9b63d9298ba78"
