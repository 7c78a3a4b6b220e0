#!/usr/bin/env bash
# Holds issue 10's size line (docs/coding-guidelines.md rule 15): in the folders below, no function
# over 80 lines and no source file over 600 lines. Exits 1 and prints each offender as
#   FILE:LINE: function 'NAME' is N lines (limit 80)
#   FILE: N lines (limit 600)
# Test sources (*_test.cc, *_fuzz.cc) are exempt from both limits: a test file is a list of cases,
# not a program to read top to bottom.
#
# Usage: tools/check-size.sh [BUILD_DIR]   (default build/; needs BUILD_DIR/compile_commands.json,
# which CMakeLists.txt writes: CMAKE_EXPORT_COMPILE_COMMANDS). Runs clang-tidy's
# readability-function-size in parallel, one job per core, on the fewest translation units of
# that database that hold every checked source: with CMake's unity build (CMakeLists.txt) a unit
# is a generated file that includes several sources, which clang-tidy then checks as headers.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build}
folders=(launcher worker rendezvous hostfiles transport coordinator doctor mpi)
max_function_lines=80
max_file_lines=600

if [ ! -f "$build/compile_commands.json" ]; then
  echo "check-size: $build/compile_commands.json not found: configure with cmake first" >&2
  exit 2
fi
if ! command -v clang-tidy >/dev/null; then
  echo "check-size: clang-tidy not found (tools/install-deps.sh installs it)" >&2
  exit 2
fi

is_test() { [[ $1 == *_test.cc || $1 == *_fuzz.cc ]]; }

if ! tracked=$(git ls-files -- "${folders[@]/%//*.cc}" "${folders[@]/%//*.h}") || [ -z "$tracked" ]; then
  echo "check-size: no source files from git ls-files (not a git checkout?): nothing checked" >&2
  exit 2
fi
sources=()
for f in $tracked; do
  is_test "$f" || sources+=("$f")
done

failed=0
# File length: every tracked non-test .h and .cc in the folders.
for f in "${sources[@]}"; do
  n=$(wc -l <"$f")
  if [ "$n" -gt "$max_file_lines" ]; then
    echo "$f: $n lines (limit $max_file_lines)"
    failed=1
  fi
done

# Function length: clang-tidy on translation units of the build; headers of the folders (and,
# in a unity build, the sources a unit includes) are checked through --header-filter, each
# finding printed once. Units are picked greedily, most unchecked sources first, so that a
# source built into several targets is parsed once, and a unit of test sources not at all.
wanted=$(for f in "${sources[@]}"; do if [[ $f == *.cc ]]; then echo "$root/$f"; fi; done)
# "UNIT SOURCE" for every source each unit of the database compiles: a unity unit's #includes.
pairs=$(grep -E '^ *"file": ' "$build/compile_commands.json" | sed -E 's/^ *"file": "(.*)",?$/\1/' |
  while read -r unit; do
    if [[ $unit == */Unity/unity_* ]]; then
      sed -nE 's/^#include "(.*)"$/\1/p' "$unit" | sed "s|^|$unit |"
    else
      echo "$unit $unit"
    fi
  done)
units=()
left=$wanted
while [ -n "$left" ]; do
  best=$(awk 'NR == FNR { want[$0] = 1; next } ($2 in want) { n[$1]++ }
    END { for (u in n) print n[u], u }' <(echo "$left") <(echo "$pairs") | sort -k1,1nr -k2 |
    head -n 1 | cut -d' ' -f2)
  if [ -z "$best" ]; then
    echo "check-size: not compiled in $build (compile_commands.json): $(echo "$left" | head -n 3 |
      tr '\n' ' ')" >&2
    exit 2
  fi
  units+=("$best")
  left=$(comm -23 <(echo "$left" | sort) <(echo "$pairs" | awk -v u="$best" '$1 == u { print $2 }' |
    sort) | grep . || true)
done
header_filter="^$root/($(
  IFS='|'
  echo "${folders[*]}"
))/"
config="{CheckOptions: [{key: readability-function-size.LineThreshold, value: $max_function_lines}]}"
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
export build config header_filter reports
# One report file per unit: parallel clang-tidys writing to one stream could interleave lines.
# clang-tidy exits nonzero only when a unit does not compile: then the check has not been made.
if ! printf '%s\n' "${units[@]}" |
  xargs -P "$(nproc)" -I{} sh -c 'f={}; out="$reports/$(echo "$f" | tr / _).txt"
    clang-tidy -p "$build" --quiet --checks="-*,readability-function-size" \
      --config="$config" --header-filter="$header_filter" "$f" >"$out" 2>/dev/null ||
      { echo "check-size: clang-tidy failed on $f:" >&2; grep -E "error: " "$out" >&2; exit 1; }'
then
  echo "check-size: clang-tidy could not parse a translation unit (above): sizes not checked" >&2
  exit 2
fi
# clang-tidy prints "FILE:L:C: warning: function 'F' exceeds recommended size/complexity thresholds"
# and then a note "N lines including whitespace and comments (threshold 80)".
findings=$(awk -v root="$root/" '
  /warning: function .* exceeds recommended size/ {
    loc = $1; sub(/:[0-9]+:$/, "", loc); sub(root, "", loc)
    match($0, /function \x27[^\x27]*\x27/); name = substr($0, RSTART + 9, RLENGTH - 9)
    next
  }
  /note: [0-9]+ lines including whitespace and comments/ && loc != "" {
    match($0, /note: [0-9]+ lines/); n = substr($0, RSTART + 6, RLENGTH - 12)
    print loc ": function " name " is " n " lines (limit " '"$max_function_lines"' ")"
    loc = ""
  }' "$reports"/*.txt | sort -u |
  # Only the checked sources: a unity unit also holds test sources, which are exempt.
  awk 'NR == FNR { keep[$0] = 1; next } { f = $0; sub(/:[0-9]+: function .*/, "", f) } f in keep' \
    <(printf '%s\n' "${sources[@]}") -)
if [ -n "$findings" ]; then
  echo "$findings"
  failed=1
fi
[ "$failed" -eq 0 ] && echo "check-size: ok (${#sources[@]} files, ${#units[@]} translation units)"
exit "$failed"
