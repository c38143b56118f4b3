#!/bin/sh
# libtensorhub.so exports th_* functions and nothing else, and every function
# the public header declares is exported.
set -eu
lib=$1 header=$2
extra=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^th_' | grep -v '^_init$\|^_fini$' || true)
[ -z "$extra" ] || { echo "exported but not th_*: $extra"; exit 1; }
declared=$(grep -o '^TH_API [^(]*(' "$header" | sed 's/($//; s/.*[ *]//' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
missing=$(echo "$declared" | while read -r f; do echo "$exported" | grep -qx "$f" || echo "$f"; done)
[ -z "$missing" ] || { echo "declared but not exported: $missing"; exit 1; }
echo "1 passed, 0 failed ($(echo "$declared" | wc -l) functions)"
