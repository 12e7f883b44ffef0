#!/usr/bin/env bash
# gpu-check.sh: prove specsweep on a GPU machine with real SGLang, in under 10 minutes on two GPUs.
#
#   bash tools/gpu-check.sh [--out DIR] [--only tp,nodes,final]
#
# From the repository root or anywhere; needs python3 with torch, and either SGLang and the
# orchestrator's dependencies installed, or the offline bundle of tools/offline-bundle.sh in .gpu/
# (or in $BUNDLE_DIR), which is unpacked first. It writes the tiny models' weights
# (trials/models/make_weights.py), then runs the checks of tools/gpu_check.py, each ending in a
# `PASS name: figures` or `FAIL name: why` line:
#   tpN-sweep  a sweep at --tp-size N = every GPU (node.gpus: N): a start-up OOM and ok trials
#   ctrl-c     SIGINT to the driver mid-trial: prompt exit, no server process, GPUs clean
#   resume     --resume finishes the budget, no finished configuration launched again
#   nvls-env   every GPU process had NVLink multicast off in its environment
#   two-nodes  two Ray nodes on this host, one GPU each: trials in parallel, each on its own GPU
#   fault      SIGKILL of a trial's GPU process mid-trial: a crash (not OOM, not lost), GPU clean,
#              the sweep goes on
#   final      every GPU at 0 MiB in nvidia-smi, no sglang:: process
# Exit status: the number of failed checks.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

# NVLink multicast stays off for everything started from here (servers inherit it through the
# trial's environment; the spec's server.env only adds to that environment).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# CUDA numbers GPUs fastest-first unless told otherwise; NVML numbers them by PCI bus. Same order.
export CUDA_DEVICE_ORDER=PCI_BUS_ID HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

bundle=${BUNDLE_DIR:-.gpu}
if [ -f "$bundle/sglang-unpack.sh" ]; then
  . "$bundle/sglang-unpack.sh" || { echo "FAIL setup: the SGLang bundle in $bundle did not unpack"; exit 1; }
fi
if [ -f "$bundle/ssweep-unpack.sh" ]; then
  . "$bundle/ssweep-unpack.sh" || { echo "FAIL setup: the orchestrator bundle in $bundle did not unpack"; exit 1; }
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

command -v python3 >/dev/null 2>&1 || { echo "FAIL setup: no python3 on PATH"; exit 1; }
# One line naming what is missing (not a traceback), and how to get it.
if ! versions=$(python3 - <<'PY' 2>&1
import importlib.metadata as m
import sys

found, missing = [], []
for name in ("sglang", "torch", "ray", "optuna"):
    try:
        found.append(f"{name} {m.version(name)}")
    except m.PackageNotFoundError:
        missing.append(name)
if missing:
    print(f"{', '.join(missing)} not installed for {sys.executable}: install them, or put the offline "
          "bundle of tools/offline-bundle.sh in .gpu/ (or $BUNDLE_DIR)")
    sys.exit(1)
print(" ".join(found))
PY
); then
  echo "FAIL setup: $(printf '%s' "$versions" | tail -n 1)"
  exit 1
fi
command -v nvidia-smi >/dev/null 2>&1 || { echo "FAIL setup: no nvidia-smi: this check needs NVIDIA GPUs and their driver"; exit 1; }
echo "setup: $versions; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c | xargs)"
python3 trials/models/make_weights.py trials/models >/dev/null || { echo "FAIL setup: make_weights.py"; exit 1; }
exec python3 tools/gpu_check.py "$@"
