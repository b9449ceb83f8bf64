#!/usr/bin/env bash
# Envoy 1.40 with the rate limit quota filter (RLQS: no call per request)
# against Envoy with the global rate limit filter (RLS: one gRPC call per
# request), both asking the same `tollgate serve` for the same limit, under
# the same wrk load, in front of the same nginx.
#
# One tenant, limit LIMIT per second (default 2000), wrk at CONNECTIONS
# (default 16) for DURATION (default 10s) per run. Envoy (--concurrency 1)
# and tollgate serve share CPU 0; nginx and wrk share CPU 1. Reported per
# run: requests/s, p50/p99, the admitted rate (non-429 answers per second)
# against the limit, and CPU microseconds per request of Envoy + tollgate
# together (utime + stime from /proc around the run, over wrk's count).
#
# Usage: scripts/bench-rlqs.sh [ROUNDS] [DURATION] [CONNECTIONS]   (LIMIT=2000)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
duration=${2:-10s}
connections=${3:-16}
limit=${LIMIT:-2000}
for tool in wrk nginx python3; do
    command -v "$tool" >/dev/null || { echo "error: $tool is not installed (apt-get install $tool)" >&2; exit 1; }
done
source scripts/proxy-bench-common.sh

mkdir -p "$work/limits"
cat > "$work/limits/quota.yaml" <<YAML
domain: quota
descriptors:
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: $limit}
YAML

# The two filters, each asking `tollgate serve` (the rls cluster); the RLS route sends the
# descriptor (name=api, tenant=<x-tenant>), the RLQS bucket is {name: api, tenant: <x-tenant>}.
rls_filter() {
    cat <<'YAML'
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: quota
              timeout: 2s
              failure_mode_deny: false
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {envoy_grpc: {cluster_name: rls}}
YAML
}
rlqs_filter() {
    cat <<'YAML'
          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              domain: quota
              rlqs_server: {envoy_grpc: {cluster_name: rls}}
              bucket_matchers:
                matcher_list:
                  matchers:
                  - predicate:
                      single_predicate:
                        input:
                          name: tenant
                          typed_config: {"@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: x-tenant}
                        value_match: {safe_regex: {google_re2: {}, regex: ".+"}}
                    on_match:
                      action:
                        name: tenant-bucket
                        typed_config:
                          "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                          bucket_id_builder:
                            bucket_id_builder:
                              name: {string_value: api}
                              tenant:
                                custom_value:
                                  name: tenant
                                  typed_config: {"@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: x-tenant}
                          reporting_interval: 1s
                          no_assignment_behavior: {fallback_rate_limit: {blanket_rule: ALLOW_ALL}}
                          expired_assignment_behavior: {reuse_last_assignment: {}}
                          deny_response_settings: {http_status: {code: 429}}
YAML
}

# The RLS route's descriptor: name=api, tenant=<x-tenant>.
tenant_descriptor='                  - actions:
                    - generic_key: {descriptor_key: name, descriptor_value: api}
                    - request_headers: {header_name: x-tenant, descriptor_key: tenant}'

cat > "$work/tenant.lua" <<'LUA'
wrk.headers["x-tenant"] = "acme"
LUA

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # MODE ROUND
    local grpc_port http_port port admin
    grpc_port=$(free_port); http_port=$(free_port); port=$(free_port); admin=$(free_port)
    "${cpu0[@]}" "$bin" serve --config "$work/limits" --grpc-addr "127.0.0.1:$grpc_port" \
        --http-addr "127.0.0.1:$http_port" --log-level warn > "$work/serve.out" 2> "$work/serve.err" &
    local serve_pid=$!
    wait_http "$http_port"
    envoy_bench_bootstrap "$port" "$admin" "$("${1}_filter")" "$tenant_descriptor" "$grpc_port" \
        > "$work/envoy.yaml"
    "${cpu0[@]}" "$envoy" -c "$work/envoy.yaml" --concurrency 1 --log-level error \
        > "$work/envoy.log" 2>&1 &
    local envoy_pid=$!
    wait_http "$port"
    # Warm up (RLQS: the stream and the first assignment), then measure.
    "${cpu1[@]}" wrk -t1 -c"$connections" -d2s -s "$work/tenant.lua" "http://127.0.0.1:$port/" > /dev/null
    local c0 e0 c1 e1
    c0=$(cpu "$serve_pid"); e0=$(cpu "$envoy_pid")
    "${cpu1[@]}" wrk -t1 -c"$connections" -d"$duration" --latency -s "$work/tenant.lua" \
        "http://127.0.0.1:$port/" > "$work/wrk.out"
    c1=$(cpu "$serve_pid"); e1=$(cpu "$envoy_pid")
    kill "$envoy_pid" "$serve_pid"; wait "$envoy_pid" "$serve_pid" 2>/dev/null || true
    python3 - "$1" "$2" "$c0" "$e0" "$c1" "$e1" "$work/wrk.out" "$limit" <<'PY'
import os, re, sys
mode, rnd = sys.argv[1:3]
c0, e0, c1, e1 = map(int, sys.argv[3:7])
text = open(sys.argv[7]).read()
limit = int(sys.argv[8])
def latency_us(label):
    m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)] if m else float("nan")
total = int(re.search(r"(\d+) requests in ([\d.]+)(s|m)", text).group(1))
secs = float(re.search(r"requests in ([\d.]+)s", text).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
limited = int(m.group(1)) if m else 0
tick = os.sysconf("SC_CLK_TCK")
cpu_us = ((c1 - c0) + (e1 - e0)) * 1e6 / tick
serve_us = (c1 - c0) * 1e6 / tick
print(f"{mode:5} {rnd:>5} {rps:9.0f} {latency_us('50'):8.0f} {latency_us('99'):8.0f} {(total - limited) / secs:10.0f} {limit:6d} {cpu_us / max(total, 1):12.2f} {serve_us / max(total, 1):12.2f}")
PY
}

echo "# duration $duration per run, $connections connections, limit $limit/s; Envoy + tollgate on CPU 0, nginx + wrk on CPU 1"
echo "# mode  round     req/s  p50 µs   p99 µs  admitted/s  limit  CPU µs/req (Envoy+serve)  of it serve"
for round in $(seq 1 "$rounds"); do
    for mode in rls rlqs; do
        run "$mode" "$round"
    done
done
