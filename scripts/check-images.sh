# Sourced by scripts/build-images.sh --check: each image starts, as its
# user, with its libraries and data; the coordinator serves, the workers train
# (from the corpus, from SentencePiece shards on a read-only volume, and as two
# data-parallel replicas in two containers), and the CUDA worker loads
# LibTorch's CUDA half. Uses build-images.sh's IMAGE, TARGETS, CUDA, phase,
# die and image_label.

# A coordinator container and two worker containers train a job of two
# replicas of one stage; the corpus is this tree's, mounted read-only at its
# own path (pacictl made the spec's path absolute). Prints what it saw.
dp_check() {
  local names=() port="" rc=0 data="$PWD/tests/data" spec
  spec=$(mktemp --suffix=.yaml)
  printf "%s\n" "name: image-replicas" \
    "model: {vocab_size: 80, num_layers: 1, d_model: 16, num_heads: 2, seq_len: 16}" \
    "pipeline: {num_stages: 1, schedule: paci, accumulation: 1, micro_batch_size: 2, data_parallel: 2}" \
    "optimizer: {lr: 3e-3}" \
    "training: {steps: 5, eval_interval: 5, eval_micro_batches: 1}" \
    "data: {corpus_path: $data/kjv-genesis.txt}" > "$spec"
  names+=("$(podman run -d --rm "${IMAGE[coordinator]}" --listen=127.0.0.1:0 \
    --metrics_address=127.0.0.1:0 --port_file=/tmp/port)")
  for _ in $(seq 100); do
    port=$(podman exec "${names[0]}" cat /tmp/port 2>/dev/null) && [[ -n $port ]] && break
    sleep 0.1
  done
  for w in 0 1; do
    names+=("$(podman run -d --rm -v "$data:$data:ro" "${IMAGE[worker]}" \
      --coordinator="127.0.0.1:$port" --worker_id="image-check-w$w" --metrics_address=127.0.0.1:0)")
  done
  build/tools/pacictl submit "$spec" --coordinator="127.0.0.1:$port" > /dev/null &&
    timeout 120 build/tools/pacictl watch image-replicas --coordinator="127.0.0.1:$port" \
      > "$spec.watch" 2>&1 || rc=$?
  build/tools/pacictl get image-replicas --coordinator="127.0.0.1:$port" > "$spec.get" 2>&1 || rc=$?
  podman stop -t 5 "${names[@]}" > /dev/null 2>&1 || true
  local hashes
  hashes=$(grep -o "weights hash [0-9a-f]*" "$spec.get" | sort -u | wc -l)
  if ((rc == 0)) && grep -q "^phase: *SUCCEEDED" "$spec.get" && ((hashes == 1)) &&
     [[ $(grep -c "weights hash" "$spec.get") == 2 ]]; then
    echo "    workers: 2 replicas in 2 containers trained, weights equal ($(grep -m1 -o "weights hash [0-9a-f]*" "$spec.get"))"
  else
    echo "    data-parallel check (exit $rc):" >&2
    tail -20 "$spec.get" "$spec.watch" >&2
    rc=1
  fi
  rm -f "$spec" "$spec.get" "$spec.watch"
  return "$rc"
}

check_images() {
  phase "check the images"
  RUN=(podman run --rm)  # runc, the host network and ulimits: containers.conf
  fails=0
  fail() { echo "    FAIL: $*" >&2; fails=$((fails + 1)); }
  for target in "${TARGETS[@]}"; do
    img=${IMAGE[$target]} program=paci_${target%-cuda}
    bin=/usr/local/bin/$program
    # The dynamic linker finds every library.
    if out=$("${RUN[@]}" --entrypoint ldd "$img" "$bin" 2>&1); then
      if grep -q "not found" <<< "$out"; then fail "$target: libraries missing:"$'\n'"$(grep "not found" <<< "$out")"; fi
    else
      fail "$target: ldd $bin: $out"
    fi
    # The entrypoint starts and prints its usage (absl's --help exits 1).
    rc=0; out=$("${RUN[@]}" "$img" --help 2>&1) || rc=$?
    if [[ $rc -gt 1 ]] || ! grep -q "$program: " <<< "$out"; then
      fail "$target --help: exit $rc:"$'\n'"$(tail -5 <<< "$out")"
    else
      echo "    $target: starts; $(grep -m1 "$program: " <<< "$out")"
    fi
    user=$(podman image inspect --format '{{.Config.User}}' "$img")
    [[ $user == 65532:65532 ]] || fail "$target: runs as '$user', not 65532:65532"
    title=$(image_label "$img" org.opencontainers.image.title)
    [[ $title == "paci-$target" ]] || fail "$target: org.opencontainers.image.title is '$title'"
  done
  # The coordinator serves as uid 65532 and keeps its store in the volume.
  rc=0; out=$("${RUN[@]}" --entrypoint sh "${IMAGE[coordinator]}" -c '
      paci_coordinator --listen=127.0.0.1:0 --metrics_address=127.0.0.1:0 --port_file=/tmp/port &
      pid=$!
      for i in $(seq 100); do [ -s /tmp/port ] && break; sleep 0.1; done
      kill $pid; wait $pid
      [ -s /tmp/port ] && [ -s /var/lib/paci/paci-coordinator.db ] && echo "serving on port $(cat /tmp/port) as $(id -u)"
    ' 2>&1) || rc=$?
  if [[ $rc -eq 0 ]]; then echo "    coordinator: $(tail -1 <<< "$out")"
  else fail "coordinator did not serve (exit $rc):"$'\n'"$(tail -10 <<< "$out")"; fi
  # The worker sees its corpus and trains a few steps on it (one stage).
  rc=0; out=$("${RUN[@]}" --entrypoint sh "${IMAGE[worker]}" -c '
      set -e
      head -c 2000 kjv.txt | grep -q "In the beginning God created the heaven and the earth"
      grep -q "In the beginning God created" tests/data/kjv-genesis.txt
      echo "corpus: $(wc -c < kjv.txt) bytes, genesis: $(wc -c < tests/data/kjv-genesis.txt) bytes"
      cat > /tmp/job.yaml <<EOF
name: image-check
model: {vocab_size: 96, num_layers: 1, d_model: 16, num_heads: 2, seq_len: 16}
pipeline: {num_stages: 1, schedule: paci, accumulation: 1, micro_batch_size: 2}
optimizer: {lr: 3e-3}
training: {steps: 3, eval_interval: 3, eval_micro_batches: 1}
data: {corpus_path: /usr/share/paci/kjv.txt, validation_fraction: 0.05}
runtime: {threads_per_stage: 1}
EOF
      paci_worker --spec=/tmp/job.yaml --stage=0 --peers=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
        > /tmp/worker.log 2>&1 || { tail -5 /tmp/worker.log; exit 1; }
      tail -1 /tmp/worker.log
    ' 2>&1) || rc=$?
  if [[ $rc -eq 0 ]]; then echo "    worker: $(head -1 <<< "$out"); trains: $(tail -1 <<< "$out" | cut -c1-100)"
  else fail "worker corpus or training (exit $rc):"$'\n'"$(tail -10 <<< "$out")"; fi
  # The CUDA worker: LibTorch's CUDA half loads (its hooks are registered), it
  # trains on the CPU, and without a GPU it refuses runtime.device: cuda naming
  # the field and the missing GPU (not a CPU build).
  if ((CUDA)); then
    rc=0; out=$("${RUN[@]}" --entrypoint sh "${IMAGE[worker-cuda]}" -c '
        set -e
        job() {
          printf "%s\n" "name: image-cuda" \
            "model: {vocab_size: 96, num_layers: 1, d_model: 16, num_heads: 2, seq_len: 16}" \
            "pipeline: {num_stages: 1, schedule: paci, accumulation: 1, micro_batch_size: 2}" \
            "optimizer: {lr: 3e-3}" \
            "training: {steps: 3, eval_interval: 3, eval_micro_batches: 1}" \
            "data: {corpus_path: /usr/share/paci/tests/data/kjv-genesis.txt}" \
            "runtime: {device: $1}" > /tmp/job-$1.yaml
        }
        job cpu; job cuda
        paci_worker --spec=/tmp/job-cpu.yaml --stage=0 --peers=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
          > /tmp/cpu.log 2>&1 || { tail -5 /tmp/cpu.log; exit 1; }
        tail -1 /tmp/cpu.log
        if paci_worker --spec=/tmp/job-cuda.yaml --stage=0 --peers=127.0.0.1:0 \
             --metrics_address=127.0.0.1:0 > /tmp/cuda.log 2>&1; then
          echo "runtime.device: cuda trained without a GPU"; exit 1
        fi
        grep -m1 "runtime.device: cuda asked for, but this worker sees no GPU" /tmp/cuda.log ||
          { tail -5 /tmp/cuda.log; exit 1; }
      ' 2>&1) || rc=$?
    if [[ $rc -eq 0 ]]; then
      echo "    worker-cuda: trains on the CPU; $(tail -1 <<< "$out" | sed 's/.*\(runtime.device\)/\1/' | cut -c1-110)"
      echo "    worker-cuda: $(podman image inspect --format '{{.Size}}' "${IMAGE[worker-cuda]}" |
        awk '{ printf "%.2f GB", $1 / 1e9 }')"
    else
      fail "worker-cuda (exit $rc):"$'\n'"$(tail -10 <<< "$out")"
    fi
  fi
  # The worker trains from token shards of a SentencePiece vocabulary, made by
  # the image's own pacictl (the dataset initializer's prepare-data) on a volume
  # and mounted read-only: the loader finds libpaci_sentencepiece.so in the
  # image, and the shards map as uid 65532.
  shards=$(mktemp -d)
  chmod 0777 "$shards"
  if "${RUN[@]}" -v "$shards:/data" --entrypoint pacictl "${IMAGE[worker]}" prepare-data \
       /usr/share/paci/tests/data/kjv-genesis.txt --out=/data/genesis --tokenizer=bpe \
       --vocab_size=400 > "$shards/prepare.log" 2>&1; then
    echo "    worker: pacictl prepare-data: $(tail -1 "$shards/prepare.log" | cut -c1-100)"
  else
    fail "the worker image's pacictl prepare-data:"$'\n'"$(tail -5 "$shards/prepare.log")"
  fi
  if [[ -d $shards/genesis ]]; then
    rc=0; out=$("${RUN[@]}" -v "$shards/genesis:/data/genesis:ro" --entrypoint sh "${IMAGE[worker]}" -c '
        set -e
        printf "%s\n" "name: image-shards" \
          "model: {vocab_size: 400, num_layers: 1, d_model: 16, num_heads: 2, seq_len: 16}" \
          "pipeline: {num_stages: 1, schedule: paci, accumulation: 1, micro_batch_size: 2}" \
          "optimizer: {lr: 3e-3}" \
          "training: {steps: 3, eval_interval: 3, eval_micro_batches: 1}" \
          "data: {dataset: /data/genesis}" > /tmp/job.yaml
        paci_worker --spec=/tmp/job.yaml --stage=0 --peers=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
          > /tmp/worker.log 2>&1 || { tail -5 /tmp/worker.log; exit 1; }
        tail -1 /tmp/worker.log
      ' 2>&1) || rc=$?
    if [[ $rc -eq 0 ]]; then echo "    worker: trains from SentencePiece shards on a read-only volume"
    else fail "worker from shards (exit $rc):"$'\n'"$(tail -10 <<< "$out")"; fi
  fi
  rm -rf "$shards"
  # Two replicas (pipeline.data_parallel: 2) in their own worker containers
  # under the coordinator's image: the workers meet at a TCPStore and average
  # gradients over Gloo as uid 65532, and the job succeeds with both replicas'
  # weights equal (the hash each reports).
  if [[ -x build/tools/pacictl ]]; then
    dp_check || fail "data-parallel replicas in containers"
  else
    echo "    workers: data-parallel check skipped (build/tools/pacictl not built)"
  fi
  ((fails == 0)) || die "$fails check(s) failed"
}
