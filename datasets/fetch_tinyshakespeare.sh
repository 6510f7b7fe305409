#!/usr/bin/env bash
# Downloads Tiny Shakespeare (Karpathy's char-rnn corpus, about 1.1 MB of plain
# text) into datasets/data/tinyshakespeare.txt for load_text() and encode_chars().
#
#   datasets/fetch_tinyshakespeare.sh          # into datasets/data/
#   datasets/fetch_tinyshakespeare.sh DIR      # into DIR
#
# Needs curl or wget and internet access. No checksum is published with the
# file, so the script checks its exact size (1115394 bytes) and prints its
# SHA-256 for your records. Tests and CI never run this. datasets/data/ is git-ignored.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-$here/data}"
url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
expected_bytes=1115394
out="$dest/tinyshakespeare.txt"

die() { echo "fetch_tinyshakespeare: $*" >&2; exit 1; }

if [[ -f "$out" ]]; then
  echo "fetch_tinyshakespeare: $out already there"
  exit 0
fi
mkdir -p "$dest"
echo "fetch_tinyshakespeare: $url"
if command -v curl >/dev/null; then
  curl --fail --location --silent --show-error --retry 2 --output "$out.part" "$url" \
    || die "download failed (offline? behind a proxy?)"
elif command -v wget >/dev/null; then
  wget --quiet --tries=3 --output-document="$out.part" "$url" \
    || die "download failed (offline? behind a proxy?)"
else
  die "neither curl nor wget is installed (apt-get install curl)"
fi

bytes="$(wc -c <"$out.part")"
if [[ "$bytes" -ne "$expected_bytes" ]]; then
  rm -f "$out.part"
  die "got $bytes bytes, expected $expected_bytes: not the Tiny Shakespeare file (an error page?)"
fi
mv "$out.part" "$out"
if command -v sha256sum >/dev/null; then
  echo "fetch_tinyshakespeare: SHA-256 $(sha256sum "$out" | cut -d' ' -f1)"
fi
echo "fetch_tinyshakespeare: done. Load with dtl::data::load_text(\"$out\")"
