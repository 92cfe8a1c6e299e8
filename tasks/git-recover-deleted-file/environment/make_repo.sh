#!/bin/bash
# Builds /app/repo with a fixed history (fixed authors and dates, so hashes are stable).
set -euo pipefail
export GIT_AUTHOR_NAME="Lee Park" GIT_AUTHOR_EMAIL="lee@example.com"
export GIT_COMMITTER_NAME="Lee Park" GIT_COMMITTER_EMAIL="lee@example.com"
n=0
commit() {  # commit MESSAGE
  n=$((n + 1))
  export GIT_AUTHOR_DATE="2024-02-$(printf %02d "$n")T14:00:00+00:00" GIT_COMMITTER_DATE="2024-02-$(printf %02d "$n")T14:00:00+00:00"
  git add -A && git commit -q -m "$1"
}
mkdir -p /app/repo && cd /app/repo
git init -q -b main
git config user.name "Lee Park" && git config user.email lee@example.com

printf '# billing\n' > README.md
commit "Initial commit"

mkdir -p data src
printf 'region,currency,rate\nEU,EUR,0.19\nUK,GBP,0.20\nUS,USD,0.07\n' > data/rates.csv
printf 'def load_rates(path):\n    return open(path).read().splitlines()[1:]\n' > src/rates.py
commit "Add rate table"

printf 'region,code\nEU,eu-central\nUK,uk-south\n' > data/regions.csv
commit "Add region codes"

printf 'region,currency,rate\nEU,EUR,0.19\nUK,GBP,0.20\nUS,USD,0.07\nCH,CHF,0.081\n' > data/rates.csv
commit "Add Swiss rate"

printf '\nRates live in data/rates.csv.\n' >> README.md
commit "Document rate table"

printf 'region,currency,rate\nEU,EUR,0.21\nUK,GBP,0.20\nUS,USD,0.0725\nCH,CHF,0.081\nNO,NOK,0.25\n' > data/rates.csv
commit "Update EU and US rates, add Norway"

git rm -q data/rates.csv
printf 'def load_rates(path):\n    raise NotImplementedError("rates now come from the pricing service")\n' > src/rates.py
commit "Remove local rate table"

printf 'region,code\nEU,eu-central\nUK,uk-south\nUS,us-east\n' > data/regions.csv
commit "Add US region code"

printf 'region,currency,rate\nEU,EUR,0.00\n' > data/rates.example.csv
commit "Add example rate file"
