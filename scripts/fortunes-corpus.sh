#!/usr/bin/env bash
# Writes Debian's fortune cookies (the fortunes package: quotations, literature,
# riddles; a text unlike the KJV) to data/fortunes.txt, once, for the
# benchmarks that compare corpora. Installs the package when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -s data/fortunes.txt ]]; then
  if [[ ! -d /usr/share/games/fortunes ]]; then
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 fortunes
  fi
  mkdir -p data
  # The cookie files are the ones without an extension (beside them: .dat indexes, .u8 links);
  # the "%" lines between cookies become blank lines.
  find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' -print0 | sort -z |
    xargs -0 cat | sed 's/^%$//' | iconv -f utf-8 -t utf-8 -c > data/fortunes.txt.tmp
  mv data/fortunes.txt.tmp data/fortunes.txt
fi
echo "corpus: data/fortunes.txt ($(wc -c < data/fortunes.txt) bytes)"
