#!/usr/bin/env bash
# Shared by flood.sh and soak.sh: starts the shooter's dedicated server (a real process, UDP on
# loopback) printing a status line every STATS seconds, runs `loadtest` against it with the
# given arguments, lets the server see everyone leave, then prints the server's first and last
# status lines and checks what a match may leave behind.
#
#   tools/against-server.sh SECONDS STATS loadtest-args...
#
# Exit 1 when loadtest said the honest players were not clean, the server died or panicked,
# it kept entities, links or addresses after everyone left, its memory more than doubled, or it
# did not print its readiness line or stop with code 0 on SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=$1 stats=$2; shift 2
target=${CARGO_TARGET_DIR:-target}
echo "against-server: building the server and loadtest examples (dev profile)"
# --workspace: the features the test command builds with, so after it nothing is rebuilt.
cargo build --locked -q --workspace --example server --example loadtest
port=$((20000 + RANDOM % 20000))
log=$(mktemp)
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
# The server is stopped as an orchestrator stops it (SIGTERM) once everyone has gone; --seconds
# is only a cap, should it hang.
"$target/debug/examples/server" "127.0.0.1:$port" --stats "$stats" \
    --seconds "$((seconds + 60 + 3 * stats))" >"$log" 2>&1 &
server=$!
# Its readiness line, which an orchestrator waits for too.
for _ in $(seq 300); do grep -q "^ready: serving udp " "$log" && break; sleep 0.1; done
if ! grep -q "^ready: serving udp 127.0.0.1:$port" "$log"; then
    echo "against-server: no readiness line from the server in 30 s"; tail -20 "$log"; exit 1
fi
# One status period with no one yet (assets loaded, bots and their hit boxes spawned): the
# baseline of what must be left once everyone has gone.
sleep "$((stats + 1))"
verdict=0
"$target/debug/examples/loadtest" --server "127.0.0.1:$port" --seconds "$seconds" "$@" 2>&1 \
    | grep -v " INFO \| DEBUG " || verdict=1
if ! kill -0 "$server" 2>/dev/null; then
    echo "against-server: the server died during the run"; tail -20 "$log"; exit 1
fi
# The players are gone: wait for a status line printed after netcode's timeout (10 s) that
# shows no link, at most two periods past it.
stats_count() { sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -c "^server stats:" || true; }
gone_at=$(stats_count)
for _ in $(seq $((10 * (10 + 2 * stats + 2)))); do
    latest=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep "^server stats:" | tail -1)
    if [ "$(stats_count)" -gt "$gone_at" ] && [[ "$latest" == *" links=0 "* ]]; then break; fi
    sleep 0.1
done
kill -TERM "$server"
stopped=0
wait "$server" || stopped=$?
if [ "$stopped" != 0 ]; then
    echo "against-server: the server exited with $stopped on SIGTERM (0 expected)"; tail -20 "$log"; exit 1
fi
if ! grep -q "stopped after" "$log"; then
    echo "against-server: the server did not stop gracefully on SIGTERM"; tail -20 "$log"; exit 1
fi
echo "against-server: SIGTERM stopped the server: $(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -o 'stopping: .*\|stopped after .*' | tr '\n' ';')"
if grep -q "panicked" "$log"; then
    echo "against-server: the server panicked"; grep -A5 panicked "$log" | head -20; exit 1
fi
echo "server warnings, by kind (the counts in them are the server's own):"
sed 's/\x1b\[[0-9;]*m//g' "$log" | grep " WARN " | sed 's/.* WARN //; s/[0-9][0-9.]*/N/g' \
    | sort | uniq -c | sort -rn | head -12 || true
stats_lines=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep "^server stats:")
empty=$(echo "$stats_lines" | sed -n 2p)  # before anyone joined (the first line is at start)
first=$(echo "$stats_lines" | sed -n 3p)  # the first period with the players in
busy=$(echo "$stats_lines" | grep -v " connected=0 " | tail -1)  # the last one with them
last=$(echo "$stats_lines" | tail -1)
echo "before:        $empty"
echo "first period:  $first"
echo "last busy:     $busy"
echo "all gone:      $last"
field() { echo "$1" | grep -o " $2=[0-9.]*" | cut -d= -f2; }
for f in entities links addresses; do
    if [ "$(field "$last" $f)" != "$(field "$empty" $f)" ]; then
        echo "against-server: $f left behind: $(field "$empty" $f) at start, $(field "$last" $f) after everyone left"
        verdict=1
    fi
done
rss_first=$(field "$first" rss_kb) rss_last=$(field "$last" rss_kb)
echo "memory: ${rss_first} kB in the first period, ${rss_last} kB at the end"
if [ "$rss_last" -gt $((rss_first * 2)) ]; then
    echo "against-server: memory more than doubled"; verdict=1
fi
exit "$verdict"
