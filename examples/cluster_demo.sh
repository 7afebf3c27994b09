#!/usr/bin/env bash
# A Dask cluster and a bucket, deployed as a team deploys them, here on one machine (`make cluster-demo`):
#   1. the store: RETBENCH_DEMO_STORE (a bucket URL of yours, keys in the environment) or, unset,
#      moto's S3 server on 127.0.0.1 with a fake key pair;
#   2. `dask scheduler` and two `dask worker` processes, each in a folder of its own (working
#      directory, HOME, --local-directory) with an environment of its own;
#   3. the sample collection run plainly (one process, a local store), then on the cluster
#      (`retbench run SPEC --dask tcp://...`, store_dir on the bucket, embedding and flat/IVF search sharded);
#   4. benchmarks/same_tables.py: the two runs' summary, per_query and runs tables, value for value;
#   5. everything it started stopped (also on Ctrl-C or a failure).
# On real hosts each line of step 2 runs on its own host: docs/guide/scale.md, "A cluster on real hosts".
# On one machine the workers share the run's scratch folder (tests/pipeline/test_dask_cluster.py gives each
# its own with a mount namespace).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
WORK=${WORK:-/tmp/retbench-cluster-demo}
PORT=${PORT:-8786}
rm -rf "$WORK" && mkdir -p "$WORK"
pids=()
teardown() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap teardown EXIT

free_port() { "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# 1. The store. Keys only ever in the environment: never in the spec, the URL or a log.
if [ -n "${RETBENCH_DEMO_STORE:-}" ]; then
    STORE=$RETBENCH_DEMO_STORE  # e.g. s3://my-bucket/retbench-demo?region=eu-west-1, with AWS_* set
else
    MOTO_PORT=$(free_port)
    "$VENV/bin/python" -m moto.server -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
    pids+=($!)
    export AWS_ACCESS_KEY_ID=demo-access-key AWS_SECRET_ACCESS_KEY=demo-secret-key AWS_DEFAULT_REGION=us-east-1
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$MOTO_PORT/moto-api/" >/dev/null && break; sleep 0.2; done
    "$VENV/bin/python" -c "import pyarrow.fs as f; f.S3FileSystem(endpoint_override='127.0.0.1:$MOTO_PORT', scheme='http', region='us-east-1', allow_bucket_creation=True).create_dir('retbench-demo')"
    STORE="s3://retbench-demo/store?endpoint_override=127.0.0.1:$MOTO_PORT&scheme=http&region=us-east-1"
fi
SCRATCH=$WORK/scratch  # store_mirror: a path every worker host can create

# 2. The cluster: the scheduler, then each worker with its own folder and environment.
"$VENV/bin/dask" scheduler --host 127.0.0.1 --port "$PORT" --no-dashboard >"$WORK/scheduler.log" 2>&1 &
pids+=($!)
for i in 0 1; do
    mkdir -p "$WORK/worker$i"/{home,local}
    (cd "$WORK/worker$i" && exec env -i PATH="$PATH" HOME="$WORK/worker$i/home" \
        AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-}" \
        AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" \
        RETBENCH_OBJECT_STORES="{\"$SCRATCH\": \"$STORE\"}" \
        "$VENV/bin/dask" worker "tcp://127.0.0.1:$PORT" --host 127.0.0.1 --nthreads 1 --no-dashboard \
        --name "worker$i" --local-directory "$WORK/worker$i/local") >"$WORK/worker$i.log" 2>&1 &
    pids+=($!)
done
"$VENV/bin/python" -c "
from distributed import Client
with Client('tcp://127.0.0.1:$PORT', timeout=120) as client:
    client.wait_for_workers(2, timeout=120)
print('cluster: scheduler tcp://127.0.0.1:$PORT, 2 workers')"

# 3. The same spec twice: plainly, and on the cluster with the store in the bucket.
spec() {  # name, store_dir, extra lines
    cat >"$WORK/$1.yaml" <<EOF
name: cluster-demo
dataset: {path: $ROOT/data/sample, format: jsonl, split: all}
chunking: {strategy: paragraph, max_words: 120}
providers: [{name: lexical, kind: hashing, batch_size: 16$3, options: {dim: 256}}]
indexes: {$4ivf: {nlist: 4, nprobe: [2]}}
output_dir: $WORK/out-$1
store_dir: "$2"
$5
EOF
}
spec plain "$WORK/plain-store" "" "" ""
spec cluster "$STORE" ", shards: 4" "shards: 2, " "store_mirror: $SCRATCH"
run() {  # name, retbench's arguments after the spec
    local name=$1
    shift
    if ! "$VENV/bin/retbench" run "$WORK/$name.yaml" "$@" >"$WORK/$name.log" 2>&1; then
        tail -n 5 "$WORK/$name.log"
        exit 1
    fi
    echo "$name run: $WORK/out-$name (log: $WORK/$name.log)"
}
run plain
run cluster --dask "tcp://127.0.0.1:$PORT"
grep -E "dask: |to embed|stage score" "$WORK/cluster.log" | cut -c1-160

# 4. The comparison.
"$VENV/bin/python" benchmarks/same_tables.py "$WORK/out-plain" "$WORK/out-cluster" --tables summary per_query runs
# 5. Teardown: the trap stops the workers, the scheduler and moto.
