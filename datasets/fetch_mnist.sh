#!/usr/bin/env bash
# Downloads MNIST (the four IDX files) into datasets/data/mnist/, checks each
# download against its published MD5 sum, and unpacks it for load_mnist().
#
#   datasets/fetch_mnist.sh            # into datasets/data/mnist
#   datasets/fetch_mnist.sh DIR        # into DIR
#
# Needs curl or wget, md5sum and gunzip, and internet access. Tests and CI never
# run this: they use the generated data sets. datasets/data/ is git-ignored.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-$here/data/mnist}"

# The mirrors torchvision uses, in order; yann.lecun.com often refuses downloads.
mirrors=(
  "https://ossci-datasets.s3.amazonaws.com/mnist"
  "https://storage.googleapis.com/cvdf-datasets/mnist"
  "http://yann.lecun.com/exdb/mnist"
)
# file  md5 of the .gz (as published with torchvision)
files=(
  "train-images-idx3-ubyte f68b3c2dcbeaaa9fbdd348bbdeb94873"
  "train-labels-idx1-ubyte d53e105ee54ea40749a09fcbcd1e9432"
  "t10k-images-idx3-ubyte 9fb629c4189551a2d022fa330f9573f3"
  "t10k-labels-idx1-ubyte ec29112dd5afa0611ce80d1b7f02629c"
)

die() { echo "fetch_mnist: $*" >&2; exit 1; }

download() {  # url output
  if command -v curl >/dev/null; then
    curl --fail --location --silent --show-error --retry 2 --output "$2" "$1"
  elif command -v wget >/dev/null; then
    wget --quiet --tries=3 --output-document="$2" "$1"
  else
    die "neither curl nor wget is installed (apt-get install curl)"
  fi
}

command -v md5sum >/dev/null || die "md5sum is missing (coreutils)"
command -v gunzip >/dev/null || die "gunzip is missing (apt-get install gzip)"
mkdir -p "$dest"

for entry in "${files[@]}"; do
  read -r name md5 <<<"$entry"
  if [[ -f "$dest/$name" ]]; then
    echo "fetch_mnist: $dest/$name already there"
    continue
  fi
  got=""
  for mirror in "${mirrors[@]}"; do
    echo "fetch_mnist: $mirror/$name.gz"
    if download "$mirror/$name.gz" "$dest/$name.gz.part" 2>/dev/null; then
      sum="$(md5sum "$dest/$name.gz.part" | cut -d' ' -f1)"
      if [[ "$sum" == "$md5" ]]; then
        got=yes
        break
      fi
      echo "fetch_mnist:   MD5 $sum, expected $md5: corrupt or changed; trying the next mirror" >&2
    else
      echo "fetch_mnist:   download failed; trying the next mirror" >&2
    fi
  done
  if [[ -z "$got" ]]; then
    rm -f "$dest/$name.gz.part"
    die "could not download $name.gz with a matching MD5 from any mirror (offline? behind a proxy?)"
  fi
  mv "$dest/$name.gz.part" "$dest/$name.gz"
  gunzip --force "$dest/$name.gz"
done

echo "fetch_mnist: done. Load with"
echo "  dtl::data::load_mnist(\"$dest/train-images-idx3-ubyte\", \"$dest/train-labels-idx1-ubyte\")"
