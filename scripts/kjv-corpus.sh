#!/usr/bin/env bash
# Writes the King James Bible (Debian's bible-kjv) to data/kjv.txt, once.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -s data/kjv.txt ]]; then
  mkdir -p data
  bible -l0 "Gen1:1-Rev22:21" > data/kjv.txt.tmp
  mv data/kjv.txt.tmp data/kjv.txt
fi
echo "corpus: data/kjv.txt ($(wc -c < data/kjv.txt) bytes)"
