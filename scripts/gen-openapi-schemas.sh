#!/usr/bin/env bash
# Regenerates crates/apiserver/openapi/schemas.json, the OpenAPI v3 schemas of the served
# kinds (and every type they reference), from the k8s-openapi types by tools/openapi-gen.
# Run it after changing the k8s-openapi version.
set -euo pipefail
cd "$(dirname "$0")/.."
out=crates/apiserver/openapi/schemas.json
cargo run --quiet --release --manifest-path tools/openapi-gen/Cargo.toml > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(wc -c < "$out") bytes)"
