#!/usr/bin/env bash
# Builds a Gradescope autograder zip for one lab:
#   grader/gradescope/make_package.sh NN OUT.zip [HIDDEN_DIR]
# The zip holds setup.sh and run_autograder at its top and the repository
# (git HEAD, reference/ and grader/hidden/ included: the image is the
# instructor's) under source/. HIDDEN_DIR, if given, goes in as the lab's extra
# hidden tests (--hidden). Students never see the zip's contents.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 NN OUT.zip [HIDDEN_DIR]" >&2; exit 2; }
lab="$1" out="$(realpath -m "$2")" hidden="${3:-}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/source"
git -C "$root" archive HEAD | tar -x -C "$stage/source"
printf '%s\n' "$lab" > "$stage/source/grader/gradescope/LAB"
if [[ -n "$hidden" ]]; then cp -r "$hidden" "$stage/source/grader/gradescope/hidden"; fi
cp "$root/grader/gradescope/setup.sh" "$root/grader/gradescope/run_autograder" "$stage/"
chmod +x "$stage/setup.sh" "$stage/run_autograder"
rm -f "$out"
(cd "$stage" && python3 -c "
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:
    for d, _, files in os.walk('.'):
        for f in files:
            p = os.path.join(d, f)
            info = zipfile.ZipInfo.from_file(p, os.path.relpath(p, '.'))
            with open(p, 'rb') as fh:
                z.writestr(info, fh.read(), zipfile.ZIP_DEFLATED)
" "$out")
echo "wrote $out (lab $lab$([[ -n "$hidden" ]] && echo ", hidden tests from $hidden"))"
