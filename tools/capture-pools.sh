#!/usr/bin/env bash
# capture-pools.sh: which CUDA graphs SGLang captures for a graph batch at or above max running requests,
# on a GPU node, for the same-server rule (`config.served`, SGLang's `SAME_SERVER` in
# orchestrator/engines/sglang/declaration.py): each pair of one max running, two graph batches, is launched
# once each with the tiny models of trials/models (weights written here), until the server is ready; its
# log, the command on its first line, goes to $OUT (or ./capture-pools) as mrrM-gbsG.log.
#
#   . .gpu/sglang-unpack.sh && bash tools/capture-pools.sh ["MRR GBS" ...]
#
# Default pairs: max running 96 (one of SGLang's capture sizes) with graph bs 96 and 256, and max running
# 100 (not one) with graph bs 100 and 256.
set -uo pipefail
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1
out=${OUT:-capture-pools}
mkdir -p "$out"
[ -f trials/models/tiny-llama/model.safetensors ] || python3 trials/models/make_weights.py trials/models
pairs=("$@")
[ ${#pairs[@]} -gt 0 ] || pairs=("96 96" "96 256" "100 100" "100 256")
for pair in "${pairs[@]}"; do
  read -r mrr gbs <<<"$pair"
  log="$out/mrr$mrr-gbs$gbs.log"
  cmd=(python3 -m sglang.launch_server --model-path trials/models/tiny-llama --tp-size 1
       --mem-fraction-static 0.8 --cuda-graph-max-bs-decode "$gbs" --max-running-requests "$mrr"
       --speculative-algorithm EAGLE3 --speculative-draft-model-path trials/models/tiny-llama-eagle3
       --speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3
       --skip-tokenizer-init --attention-backend triton --sampling-backend pytorch --grammar-backend none
       --cuda-graph-backend-prefill disabled --host 127.0.0.1 --port 30111)
  echo "\$ ${cmd[*]}" >"$log"
  started=$(date +%s)
  # Its own process group, so that the scheduler it starts is stopped with it (by the group's id).
  setsid "${cmd[@]}" >>"$log" 2>&1 </dev/null &
  pid=$!
  until grep -q "fired up and ready" "$log" || ! kill -0 "$pid" 2>/dev/null || [ $(( $(date +%s) - started )) -gt 300 ]; do
    sleep 2
  done
  kill -TERM -- "-$pid" 2>/dev/null; sleep 3; kill -KILL -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  echo "mrr $mrr gbs $gbs: $(( $(date +%s) - started )) s; $(grep -o 'Capture target verify CUDA graph begin.*bs=\[[0-9, ]*\]' "$log" | grep -o 'bs=.*')"
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader
