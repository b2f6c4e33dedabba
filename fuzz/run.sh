#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 20) with libFuzzer (cargo fuzz, nightly),
# starting from the committed corpora, and prints one line per target: inputs run, speed, and
# whether it found a crash, a timeout or a leak. Exit 1 if any target did.
#
#   fuzz/run.sh 20             every target, 20 s each (what CI runs)
#   fuzz/run.sh --runs 10000000 datagram   one target, ten million inputs
#   fuzz/run.sh --capture      re-seed the corpora from a real match's messages
#
# Without a nightly toolchain it says so and exits 0 (the project builds on stable; only the
# fuzzer needs nightly). New inputs the fuzzer finds go to a scratch folder, not the corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(datagram server_move fire_request reload_request delay_report net_beat proxy_updates ron_assets)
limit=(-max_total_time=20)
capture=0
case "${1:-}" in
    --capture) capture=1; shift ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    "") ;;
    *) limit=(-max_total_time="$1"); shift ;;
esac
if [ $# -gt 0 ]; then TARGETS=("$@"); fi

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: skipped: no nightly toolchain here (cargo +nightly), which cargo fuzz needs"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz 0.13.2"
    cargo install cargo-fuzz --locked --version 0.13.2
fi
target_dir=(--target-dir "${UNLAG_FUZZ_TARGET:-fuzz/target}")
build=(--codegen-units 16 "${target_dir[@]}")
echo "fuzz: building the targets (nightly, address sanitizer)"
cargo +nightly fuzz build "${build[@]}"

if [ "$capture" = 1 ]; then
    # One pass of the fire target plays the match with capture on: every message kind fuzzed
    # is written to its target's corpus.
    UNLAG_FUZZ_CAPTURE="$PWD/fuzz/corpus" cargo +nightly fuzz run "${build[@]}" fire_request -- -runs=1
    for t in "${TARGETS[@]}"; do
        echo "$t: $(ls fuzz/corpus/$t 2>/dev/null | wc -l) inputs"
    done
    exit 0
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# One target: its line (and, if it failed, what it found) into $scratch/$t.out, and a
# $scratch/$t.failed marker when it failed. Always returns 0 (the caller reads the marker).
fuzz_one() {
    local t=$1
    local log="$scratch/$t.log" out="$scratch/$t.out" verdict runs speed cov unit
    mkdir -p "$scratch/$t" "fuzz/corpus/$t"
    # -timeout: one input taking 60 s is a hang (the first input of fire_request plays the match); -rss_limit_mb: a leak or a runaway allocation.
    if cargo +nightly fuzz run "${build[@]}" "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
        "${limit[@]}" -timeout=60 -rss_limit_mb=4096 -detect_leaks=1 -print_final_stats=1 \
        >"$log" 2>&1; then
        verdict=ok
    else
        verdict=FAILED
        touch "$scratch/$t.failed"
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    printf '%-15s %-6s %12s inputs %9s/s  %s\n' "$t" "$verdict" "${runs:-0}" "${speed:-0}" "$cov" >"$out"
    if [ "$verdict" = FAILED ]; then
        {
            grep -E "ERROR|panicked|SUMMARY|Test unit written" "$log" | head -20 || tail -30 "$log"
            grep -A3 "panicked" "$log" | head -12 || true
            # The input itself, so a failure on a machine one cannot reach reproduces here:
            # echo ... | base64 -d > x && cargo +nightly fuzz run TARGET x
            unit=$(grep -o 'Test unit written to [^ ]*' "$log" | head -1 | sed 's/Test unit written to //' || true)
            if [ -n "$unit" ] && [ -f "$unit" ] && [ "$(stat -c %s "$unit")" -le 4096 ]; then
                echo "input (base64): $(base64 -w0 "$unit")"
            fi
        } >>"$out"
    fi
    return 0
}

# libFuzzer runs one input at a time on one core: as many targets run at once as the machine has
# cores, so each still gets a whole core for its time (and CI's fuzz step takes half as long on
# two cores). The lines come out in the targets' order.
parallel=$(nproc 2>/dev/null || echo 1)
for t in "${TARGETS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do
        wait -n || true
    done
    fuzz_one "$t" &
done
wait
failed=0
for t in "${TARGETS[@]}"; do
    cat "$scratch/$t.out"
    if [ -f "$scratch/$t.failed" ]; then failed=1; fi
done
exit "$failed"
