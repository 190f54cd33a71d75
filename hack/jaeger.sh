#!/usr/bin/env bash
# jaeger.sh: start (idempotent) the dev cluster's trace backend, Jaeger v2 with its in-memory
# store, as a host process on $HOST_IP: OTLP/HTTP on 4318 (where Berth's pods export, the
# chart's observability.tracing.otlpEndpoint in .berth/dev/values.yaml) and its query API and UI
# on 16686. Needs the binary (hack/build-binaries.sh jaeger, cached by version under
# ~/.cache/berth/bin/jaeger-<version>); without it, says so and does nothing (exit 0): the dev
# cluster runs without traces. Writes $DEV/jaeger.{yaml,pid,log}.
source "$(dirname "$0")/lib.sh"
LOG_TAG=jaeger
bin=$CACHE/bin/jaeger-$JAEGER_VERSION/jaeger
if [[ ! -x $bin ]]; then
  log "no Jaeger binary ($bin): no trace backend (build it: bash hack/build-binaries.sh jaeger)"
  exit 0
fi
if pid_alive "$DEV/jaeger.pid" && curl -fs "http://$HOST_IP:16686/api/services" >/dev/null 2>&1; then
  log "jaeger already up: UI http://$HOST_IP:16686, OTLP http://$HOST_IP:4318"
  exit 0
fi
stop_pidfile "$DEV/jaeger.pid" 5
mkdir -p "$DEV"
# cmd/jaeger/config.yaml of the module, reduced to OTLP in, the memory store and the query API.
cat > "$DEV/jaeger.yaml" <<YAML
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: $HOST_IP:13133
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: $HOST_IP:16686
    grpc:
      endpoint: 127.0.0.1:16685
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: $HOST_IP:4318
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML
setsid "$bin" --config "$DEV/jaeger.yaml" >> "$DEV/jaeger.log" 2>&1 < /dev/null &
echo $! > "$DEV/jaeger.pid"
for _ in $(seq 100); do curl -fs "http://$HOST_IP:16686/api/services" >/dev/null 2>&1 && break; sleep 0.2; done
if curl -fs "http://$HOST_IP:16686/api/services" >/dev/null 2>&1; then
  log "jaeger up: UI http://$HOST_IP:16686, OTLP http://$HOST_IP:4318"
else
  log "jaeger did not start (see $DEV/jaeger.log): the dev cluster runs without traces"
  stop_pidfile "$DEV/jaeger.pid" 2
fi
