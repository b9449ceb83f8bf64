# Sourced by the RLS benchmark scripts: writes the two limits directories they
# measure into $1 — `one` (one generous rule for `user`) and `many` (the same
# rule among 999 others; matching is an index, so the cost per check should
# not move).
write_rls_bench_limits() { # DIR
    mkdir -p "$1/one" "$1/many"
    local generous='    rate_limit:
      unit: second
      requests_per_unit: 1000000000'
    printf 'domain: bench\ndescriptors:\n  - key: user\n%s\n' "$generous" > "$1/one/limits.yaml"
    {
        printf 'domain: bench\ndescriptors:\n'
        for i in $(seq 0 998); do
            printf '  - key: k%d\n    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n' "$i" $((i + 1))
        done
        printf '  - key: user\n%s\n' "$generous"
    } > "$1/many/limits.yaml"
}
