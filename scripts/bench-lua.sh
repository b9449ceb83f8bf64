#!/usr/bin/env bash
# Redis CPU per exact check, the check code of a base commit against this
# tree's, in one run on one redis-server: `INFO commandstats` usec_per_call
# (the time Redis spends in the call, the commands it makes included) while
# redis-benchmark calls the code with one counter per call, 50 clients,
# pipelined 16 deep.
#
# Beside it, the CPU time redis-server used per call (utime + stime from
# /proc, network and protocol included): unlike usec_per_call, which is
# wall time inside the call, it does not grow when another process takes
# the core in the middle of a call, so it is the steadier figure on a busy
# machine.
#
# The ways of calling, per algorithm:
#   old          the base commit's script (prelude.lua + check.lua), EVALSHA,
#                on a hash under tg{…}
#   hash         this tree's Functions library, FCALL, --redis-encoding hash
#                (tollgate serve's default): the same hash under tg{…}, with
#                the previous release's commands
#   packed       the same, --redis-encoding packed: a packed string under tg{…}
#   packed-eval  packed as a script, EVALSHA (a Redis without Functions)
#   floor        a function that only calls TIME, GET and SET … PX (a 16-byte
#                value) and answers 4 integers: what any exact check reading
#                Redis TIME and writing its state back costs at the least
#                (called with this tree's arguments: one ARGV element)
#   before       (only with BEFORE=<commit>) that commit's Functions library,
#                FCALL, packed: a change to the code against the code before it
# Each round measures every algorithm in every way, interleaved, so load on
# the machine falls on all alike; the table is the median of the rounds and
# each way ÷ old (and ÷ before, with BEFORE).
#
# With INSTRUCTIONS=1, redis-server runs under valgrind's callgrind and the
# figure is the instructions it executes per call (user space, network and
# protocol included, no kernel time): unlike either time, the count repeats
# from run to run whatever else the machine does, so one round is enough to
# compare two versions of the code on a busy machine (use fewer calls, e.g.
# 20000: valgrind runs redis-server about 50 times slower). CALLGRIND_DIR=<dir>
# keeps each measurement's profile there as <way>-<algorithm>.out, for
# callgrind_annotate (e.g. --inclusive=yes) to say where the instructions go.
#
# Every call is allowed and writes (10^9 per second) except the sliding
# log's, whose cost grows with its entries: its 1 ms window at 10^9 per
# second holds the calls of the last millisecond (about 100 here).
#
# Usage: scripts/bench-lua.sh [ROUNDS] [CALLS]   (defaults: 3 rounds of 200000 calls)
#        BASE=<commit> (default 454df1f, the last with the hash encoding and
#        EVALSHA) is the code to compare against.
#        BEFORE=<commit> adds the way `before` (a commit with the Functions library).
#        ALGORITHMS (default all six) picks some, e.g.
#        ALGORITHMS="token_bucket fixed_window"; WAYS (default
#        "old hash packed packed-eval floor", plus before with BEFORE) picks ways,
#        e.g. BEFORE=<commit> WAYS="before packed floor" ALGORITHMS="token_bucket fixed_window"
#        scripts/bench-lua.sh 3 200000 (about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
calls=${2:-200000}
base=${BASE:-454df1f}
before=${BEFORE:-}
before_args=""
ways=${WAYS:-old hash packed packed-eval floor${before:+ before}}
src=crates/tollgate-redis/src
redis_pin=()
instructions=${INSTRUCTIONS:-}
if [ -n "$instructions" ]; then
    command -v callgrind_control > /dev/null || { echo "error: INSTRUCTIONS needs valgrind (apt-get install valgrind)" >&2; exit 1; }
    cg_dir=$(mktemp -d)
    redis_pin=(valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$cg_dir/cg.%p")
fi
source scripts/redis-bench-common.sh
if [ -n "$instructions" ]; then
    trap 'cleanup; rm -rf "$cg_dir"' EXIT
    for _ in $(seq 1 600); do # valgrind starts redis-server slowly: a bounded wait
        [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break
        read -r -t 0.1 < /dev/zero || true
    done
fi

old=$(cli SCRIPT LOAD "$(git show "$base:$src/prelude.lua" "$base:$src/check.lua")")
new_eval=$(cli SCRIPT LOAD "$(cat "$src/prelude.lua" "$src/check.lua"; echo "return check(KEYS, ARGV, 'p')")")
load_bench_library
if [ -n "$before" ]; then
    cli FUNCTION LOAD REPLACE "$(printf '#!lua name=tollgate_before\n'; git show "$before:$src/prelude.lua" "$before:$src/check.lua"
        echo "redis.register_function('tollgate_before_check', function(k, a) return check(k, a, 'p') end)")" > /dev/null
    # A commit before "one argument per counter" takes 7 ARGV values per
    # counter and refuses one (a check of 0 units, which writes nothing).
    before_args=one
    case "$(cli FCALL tollgate_before_check 1 tg{0}bench-before-probe "0 c s 0 1 1 0" 2>&1 | tr -d '\000')" in
        *malformed*) before_args=seven ;;
    esac
fi
cli FUNCTION LOAD REPLACE "#!lua name=tollgate_floor
redis.register_function('tollgate_floor', function(keys, args)
  redis.call('TIME')
  redis.call('GET', keys[1])
  redis.call('SET', keys[1], '0123456789abcdef', 'PX', 1000)
  return {0, 1, 2, 3}
end)" > /dev/null

# name | kind hits p1 p2 phase (the check's parameters after group and op)
all_algorithms=(
    "token_bucket|s 1 1 1000000000 0"
    "gcra|s 1 1 1000 0"
    "leaky_bucket|s 1 1 1001 0"
    "fixed_window|f 1 1000000 1000000000 0"
    "sliding_window|w 1 1000000 1000000000 0"
    "sliding_log|l 1 1000 1000000000 0"
)
algorithms=()
for entry in "${all_algorithms[@]}"; do
    case " ${ALGORITHMS:-${all_algorithms[*]%%|*}} " in *" ${entry%%|*} "*) algorithms+=("$entry") ;; esac
done
[ ${#algorithms[@]} -gt 0 ] || { echo "error: ALGORITHMS: none of $ALGORITHMS is one of ${all_algorithms[*]%%|*}" >&2; exit 2; }
for way in $ways; do
    case "$way" in
        old | hash | packed | packed-eval | floor) ;;
        before) [ -n "$before" ] || { echo "error: WAYS: before needs BEFORE=<commit>" >&2; exit 2; } ;;
        *) echo "error: WAYS: unknown way $way (old hash packed packed-eval floor before)" >&2; exit 2 ;;
    esac
done

usec_per_call() { # COMMAND-NAME
    cli INFO commandstats | awk -F'[:=,]' -v c="cmdstat_$1" '$1 == c {for (i = 2; i < NF; i++) if ($i == "usec_per_call") print $(i + 1)}'
}

measure() { # WAY NAME ARGS
    local way=$1 name=$2 args=$3 call=() stat=evalsha key
    case "$way" in
        old) call=(EVALSHA "$old"); key="tg{0}bench-$name" ;;
        hash) call=(FCALL tollgate_bench_check); stat=fcall; key="tg{0}bench-hash-$name" ;;
        packed) call=(FCALL tollgate_bench_check_packed); stat=fcall; key="tg{0}bench-packed-$name" ;;
        packed-eval) call=(EVALSHA "$new_eval"); key="tg{0}bench-eval-$name" ;;
        floor) call=(FCALL tollgate_floor); stat=fcall; key="floor-$name" ;;
        before) call=(FCALL tollgate_before_check); stat=fcall; key="tg{0}bench-before-$name" ;;
    esac
    cli CONFIG RESETSTAT > /dev/null
    if [ -n "$instructions" ]; then
        callgrind_control --zero "$redis_pid" > /dev/null 2>&1
        callgrind_control --instr=on "$redis_pid" > /dev/null 2>&1
    fi
    local u0 s0 u1 s1
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$redis_pid/stat")
    # shellcheck disable=SC2086 # ARGS is a list of words
    # old (and before, up to "one argument per counter") takes 7 ARGV values
    # per counter, this tree's code (and the floor) one
    case "$way${before_args:+-$before_args}" in
        old* | before-seven) redis-benchmark -p "$port" -q -c 50 -P 16 -n "$calls" "${call[@]}" 1 "$key" 0 c $args > /dev/null ;;
        *) redis-benchmark -p "$port" -q -c 50 -P 16 -n "$calls" "${call[@]}" 1 "$key" "0 c $args" > /dev/null ;;
    esac
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$redis_pid/stat")
    if [ -n "$instructions" ]; then
        callgrind_control --dump "$redis_pid" > /dev/null 2>&1
        callgrind_control --instr=off "$redis_pid" > /dev/null 2>&1
        local dump ir
        dump=$(ls -t "$cg_dir"/cg."$redis_pid".* | head -1)
        ir=$(awk '/^summary:/ {print $2}' "$dump")
        if [ -n "${CALLGRIND_DIR:-}" ]; then
            mv "$dump" "$CALLGRIND_DIR/$way-$name.out"
        else
            rm -f "$dump"
        fi
        echo "$way $name $((ir / calls)) $((ir / calls))"
        return
    fi
    local cpu
    cpu=$(python3 -c "import os; print((($u1 + $s1) - ($u0 + $s0)) * 1e6 / os.sysconf('SC_CLK_TCK') / $calls)")
    echo "$way $name $(usec_per_call "$stat") $cpu"
}

echo "redis-server $(redis-server --version | awk '{print $3}'), $rounds rounds of $calls calls each (redis-benchmark -c 50 -P 16)," \
    "old = $base${before:+, before = $before}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq 1 "$rounds"); do
    for entry in "${algorithms[@]}"; do
        for way in $ways; do
            measure "$way" "${entry%%|*}" "${entry#*|}"
        done
    done
    echo "round $round done" >&2
done > "$work/results"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$work/results" "$instructions" $ways <<'PY'
import statistics, sys
runs, cpus = {}, {}
for line in open(sys.argv[1]):
    way, name, usec, cpu = line.split()
    runs.setdefault(name, {}).setdefault(way, []).append(float(usec))
    cpus.setdefault(name, {}).setdefault(way, []).append(float(cpu))
instructions = sys.argv[2] != ""
ways = sys.argv[3:]
short = {"packed-eval": "p-eval"}
# Each way, then its ratio to old and to before where those were measured.
refs = [r for r in ("old", "before") if r in ways]
def table(title, data):
    print(title)
    head = f"{'algorithm':<15}"
    for w in ways:
        head += f" {short.get(w, w):>6}"
        for r in refs:
            if w != r:
                head += f" {'/' + r[0]:>6}"
    print(head + "   rounds (" + " | ".join(ways) + ")")
    for name, by_way in data.items():
        m = {w: statistics.median(v) for w, v in by_way.items()}
        row = f"{name:<15}"
        for w in ways:
            row += f" {m[w]:6.0f}" if instructions else f" {m[w]:6.2f}"
            for r in refs:
                if w != r:
                    row += f" {m[w] / m[r]:6.2f}"
        rows = " | ".join(" ".join(f"{x:.0f}" if instructions else f"{x:.2f}" for x in by_way[w]) for w in ways)
        print(f"{row}   {rows}")
if instructions:
    table("redis-server instructions per call (callgrind), median (/o: ÷ old, /b: ÷ before):", runs)
    sys.exit()
table("usec_per_call (INFO commandstats), median µs (/o: ÷ old, /b: ÷ before):", runs)
print()
table("redis-server CPU per call (/proc, network included), median µs:", cpus)
PY
