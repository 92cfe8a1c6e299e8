#!/bin/bash
set -euo pipefail
cd /app
sqlite3 library.db <<'SQL'
ALTER TABLE books ADD COLUMN author_name TEXT;
UPDATE books SET author_name = (SELECT name FROM authors WHERE authors.id = books.author_id);
SQL
sqlite3 library.db 'SELECT COUNT(*), COUNT(author_name) FROM books;'
