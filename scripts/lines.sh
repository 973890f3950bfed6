#!/usr/bin/env bash
# Lines of product code per crate: Rust sources under src/ without their tests (files named
# tests.rs or testing.rs, folders named tests/, and the `#[cfg(test)] mod tests` at a file's end).
set -euo pipefail
cd "$(dirname "$0")/.."
count() {
    find "$1/src" -name '*.rs' ! -name tests.rs ! -name testing.rs ! -path '*/tests/*' -print0 |
        xargs -0 awk '
            FNR == 1 { skipping = 0 }
            /^#\[cfg\(test\)\]$/ { pending = 1; next }
            pending && /^mod (tests|testing)/ { skipping = 1 }
            pending && !skipping { n++ }
            { pending = 0 }
            !skipping { n++ }
            END { print n }'
}
total=0
for crate in $(sed -n '/^members = \[/,/^\]/s/^ *"\(.*\)",$/\1/p' Cargo.toml); do
    [ -d "$crate/src" ] || continue
    n=$(count "$crate")
    total=$((total + n))
    printf '%-16s %6d\n' "$crate" "$n"
done
printf '%-16s %6d\n' total "$total"
