# Shared set-up of the proxy and Envoy benchmarks (bench-proxy.sh,
# bench-proxy-latency.sh, bench-proxy-global.sh, bench-rlqs.sh), sourced
# from the repository root: finds Envoy, pins CPUs, builds `tollgate`,
# starts nginx, writes Envoy's bootstrap (envoy_bench_bootstrap), and
# defines start_proxy / stop_proxy for `tollgate proxy` and Envoy with the
# same local_ratelimit configuration.
# The caller sets `set -euo pipefail` and leaves $work and $pids to this file.
envoy=${TOLLGATE_ENVOY:-$PWD/.venv/bin/envoy}
[ -x "$envoy" ] || { echo "error: no Envoy at $envoy; run scripts/test.sh or set TOLLGATE_ENVOY" >&2; exit 1; }
# CPU pinning prefixes; commands are started directly (not through a shell
# function) so that $! is the process itself, for its CPU time and its kill.
if command -v taskset >/dev/null; then cpu0=(taskset -c 0); cpu1=(taskset -c 1); else cpu0=(); cpu1=(); fi

source scripts/tollgate-bin.sh
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Polls (bounded: 200 x 50 ms) until something answers HTTP on PORT.
wait_http() {
    for _ in $(seq 1 200); do
        python3 - "$1" <<'PY' && return 0
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2).close()
except OSError:
    sys.exit(1)
PY
        read -r -t 0.05 < /dev/zero || true
    done
    echo "error: nothing listens on port $1" >&2
    return 1
}

# nginx: one worker, its own prefix, answering 200 "ok" from memory.
nginx_port=$(free_port)
mkdir -p "$work/nginx/logs"
cat > "$work/nginx/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$nginx_port;
        location / { return 200 "ok\n"; }
    }
}
NGINX
"${cpu1[@]}" nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" &
pids+=($!)
wait_http "$nginx_port"

# The LocalRateLimit of each case (filter enabled and enforced everywhere).
limit_config() { # MAX_TOKENS
    cat <<YAML
stat_prefix: bench
token_bucket: {max_tokens: $1, tokens_per_fill: $1, fill_interval: 1s}
filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}
filter_enforced: {default_value: {numerator: 100, denominator: HUNDRED}}
YAML
}

# Envoy's bootstrap for a benchmark: a listener on PORT (admin on
# ADMIN_PORT) routing everything to nginx through FILTERS (http_filters
# items before the router, indented 10 spaces), the route carrying
# RATE_LIMITS (its rate_limits items, indented 18 spaces; empty for none);
# with RLS_PORT, a cluster `rls` speaking HTTP/2 to that port.
envoy_bench_bootstrap() { # PORT ADMIN_PORT FILTERS RATE_LIMITS [RLS_PORT]
    cat <<YAML
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: $2}}
static_resources:
  listeners:
  - name: bench
    address: {socket_address: {address: 127.0.0.1, port_value: $1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: bench
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route:
                  cluster: nginx
$(if [ -n "$4" ]; then echo "                  rate_limits:"; echo "$4"; fi)
          http_filters:
$3
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: nginx
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: nginx
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $nginx_port}}}
YAML
    if [ -n "${5:-}" ]; then
        cat <<YAML
  - name: rls
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: rls
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $5}}}
YAML
    fi
}

# Envoy's local_ratelimit filter of MAX_TOKENS per second, as an http_filters item.
local_ratelimit_filter() { # MAX_TOKENS
    cat <<YAML
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
$(limit_config "$1" | sed 's/^/              /')
YAML
}

start_proxy() { # NAME MAX_TOKENS -> sets proxy_pid, proxy_port
    proxy_port=$(free_port)
    case $1 in
    tollgate)
        limit_config "$2" > "$work/limit.yaml"
        "${cpu0[@]}" "$bin" proxy --listen "127.0.0.1:$proxy_port" --upstream "127.0.0.1:$nginx_port" \
            --local-ratelimit "$work/limit.yaml" --worker-threads 1 --log-level warn \
            > "$work/tollgate.out" 2> "$work/tollgate.err" &
        ;;
    envoy)
        envoy_bench_bootstrap "$proxy_port" "$(free_port)" "$(local_ratelimit_filter "$2")" "" \
            > "$work/envoy.yaml"
        "${cpu0[@]}" "$envoy" -c "$work/envoy.yaml" --concurrency 1 --log-level warn \
            --base-id $$ --disable-hot-restart > /dev/null 2> "$work/envoy.err" &
        ;;
    esac
    proxy_pid=$!
    pids+=("$proxy_pid")
    wait_http "$proxy_port"
}

stop_proxy() {
    kill "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
}
