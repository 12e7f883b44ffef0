#!/usr/bin/env bash
# offline-bundle.sh: build what an air-gapped GPU node needs to run specsweep with SGLang.
#
# The node is assumed to be a CUDA image with CPython 3.12 on x86-64 (glibc 2.35+) and
# torch 2.11.0, triton, transformers, numpy, aiohttp, pyyaml, requests, grpcio, protobuf, psutil
# and nvidia-ml-py already installed; everything else is carried. Run this from the repo root on
# a machine with pip and access to PyPI; wheels are picked for the node, not for this machine.
#
#   bash tools/offline-bundle.sh [all|sglang|deps|wheelhouse|scripts]      (default: all)
#
#   sglang      SGLang 0.5.17 and what it imports beside torch, repacked for Hopper (sm90) ->
#               .gpu/sglang-site.tar.xz.NN, .gpu/sglang-site.sha256, .gpu/sglang-unpack.sh
#               (unpacks into /tmp/site)
#   deps        the orchestrator's own dependencies (Ray with its dashboard, Optuna, MLflow
#               client with SQLite tracking, Plotly) minus what the node or the SGLang bundle
#               already has -> .gpu/ssweep-site.tar.xz.NN, .gpu/ssweep-site.sha256,
#               .gpu/ssweep-unpack.sh (unpacks into /tmp/ssweep-site)
#   all         both of the above
#   scripts     the two unpack scripts alone, written again over bundles already built
#   wheelhouse  for a node that has pip but no index: every wheel of `specsweep[gpu]` (the
#               project built as a wheel, torch included) in $WHEELHOUSE, plus an install.sh
#               there that runs `pip install --no-index --find-links` on the node
#
# On the node, from the repo root:
#   . .gpu/sglang-unpack.sh || exit; . .gpu/ssweep-unpack.sh || exit; python3 -m orchestrator.sweep ...
# The bundles are xz tars cut into pieces of at most $PIECE_MB MiB, so that they can travel in
# size-limited transfers. The deps pieces may arrive over several transfers into the same /tmp:
# ssweep-unpack.sh keeps each piece it sees in /tmp/ssweep-pieces and unpacks once all are there.
# Two builds from the same wheels give byte-identical pieces.
#
# Settings (environment):
#   PYTHON       python whose pip is used here (default python3; pip 23.2+)
#   WHEEL_CACHE  where wheels are downloaded (default /tmp/offline-wheels)
#   STAGE        scratch folder (default /tmp/offline-stage)
#   OUT_DIR      where the pieces and scripts go (default .gpu; keep it out of git)
#   PIECE_MB     piece size in MiB (default: 64 less the repository's tracked files, less 3)
#   WHEELHOUSE   output folder of the wheelhouse mode (default wheelhouse)
# Needs here: pip, GNU tar 1.28+, xz, split, strip (binutils), sha256sum.
set -euo pipefail

MODE=${1:-all}
PY=${PYTHON:-python3}
CACHE=${WHEEL_CACHE:-/tmp/offline-wheels}
STAGE=${STAGE:-/tmp/offline-stage}
OUT_DIR=${OUT_DIR:-.gpu}
# A transfer holds the repository's tracked files and what it carries, 64 MiB in all: a piece is what is
# left beside this repository, less 3 MiB for the transfer's own overhead (a 50 MiB piece beside 13.3 MiB
# of repository was refused).
repo_mib=$(git -C "$(dirname "$0")/.." ls-files -z | (cd "$(dirname "$0")/.." && xargs -0 stat -c %s 2>/dev/null) |
  awk '{s += $1} END {print int(s / 1048576) + 1}')
PIECE_MB=${PIECE_MB:-$((64 - repo_mib - 3))}
WHEELHOUSE=${WHEELHOUSE:-wheelhouse}

# Wheels for the node: CPython 3.12 on x86-64.
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --platform any)
for n in 17 24 26 27 28 31 34 35; do TARGET+=(--platform "manylinux_2_${n}_x86_64"); done
TARGET+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)

# SGLang and every package it imports on the path of `launch_server` with a Llama target and an
# EAGLE-3 draft, pinned. Left out on purpose (imported lazily, or only by backends and features a
# sweep does not use): flash-attn-4, nvidia-cutlass-dsl, tilelang, torchao, torch_memory_saver,
# outlines, llguidance, datasets, modelscope, openai-harmony, py-spy, watchfiles.
SGLANG_REQS=(
  sglang==0.5.17 sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1 sgl-deep-gemm==0.1.5.post1
  # sglang 0.5.17 pins transformers 5.12.1 (5.17 fails at import), which wants tokenizers<=0.23.0
  transformers==5.12.1 tokenizers==0.22.2
  # fastapi 0.142+ imports opentelemetry at start-up
  fastapi==0.141.1 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  pyzmq==27.3.0 orjson==3.13.0 msgspec==0.23.0 pybase64==1.5.1 setproctitle==1.3.8 dill==0.4.1
  zstandard==0.25.0
  openai==2.6.1 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1 partial-json-parser==0.2.1.1.post7
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  xgrammar==0.2.1 apache-tvm-ffi==0.1.11
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 jedi==0.20.1 parso==0.8.7 matplotlib-inline==0.2.2
  traitlets==5.16.1 pexpect==4.9.0 ptyprocess==0.7.0 prompt-toolkit==3.0.53 wcwidth==0.9.4
  stack-data==0.6.3 asttokens==3.0.2 executing==2.3.0 pure-eval==0.2.4 decorator==5.3.1
  compressed-tensors==0.20.1 loguru==0.7.3 gguf==0.19.0 soundfile==0.13.1 cffi==2.1.1 pycparser==3.12
)

# The orchestrator's dependencies the node and the SGLang bundle lack, pinned. Ray's `default`
# extra is carried (the sweep starts Ray's dashboard unless --no-dashboard) except py-spy
# (dashboard stack profiling) and virtualenv with its needs (pip/uv runtime environments).
# pydantic, fastapi, uvicorn, starlette, jsonschema and cffi come from the SGLang bundle.
DEPS_REQS=(
  ray==2.60.0
  aiohttp-cors==0.8.1 colorful==0.5.8 smart-open==9.0.2
  opencensus==0.11.4 opencensus-context==0.1.3 google-api-core==2.44.0
  googleapis-common-protos==1.76.0 proto-plus==1.29.0 google-auth==2.63.0 pyasn1==0.6.5
  pyasn1-modules==0.4.2 cryptography==50.0.2
  opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2
  opentelemetry-semantic-conventions==0.66b2 opentelemetry-exporter-prometheus==0.66b2
  optuna==5.0.0 alembic==1.20.1 mako==1.4.3 sqlalchemy==2.1.9 colorlog==6.12.0
  mlflow-skinny==3.17.2 cachetools==7.3.3 databricks-sdk==0.162.0 gitpython==3.2.1 gitdb==4.0.12
  smmap==5.0.3 importlib-metadata==9.1.0 python-dotenv==1.2.4 sqlparse==0.6.1
  plotly==7.1.0
)
# The generated protobuf modules above (opentelemetry-proto, googleapis-common-protos) refuse a
# protobuf runtime older than 6.33.5; this one is used only where the node's own is older.
PROTOBUF_REQ=protobuf==7.36.2

log() { echo "== $*" >&2; }

check_ignored() {
  if git rev-parse --git-dir >/dev/null 2>&1 && ! git check-ignore -q "$OUT_DIR/x"; then
    echo "warning: $OUT_DIR/ is not ignored by git here; add /$OUT_DIR/ to .git/info/exclude" >&2
  fi
}

# install_site NAME DEST REQ...: download the pinned wheels and install them, without their
# dependencies (every one is pinned above), into DEST.
install_site() {
  local name=$1 dest=$2
  shift 2
  mkdir -p "$CACHE" "$STAGE"
  printf '%s\n' "$@" >"$STAGE/$name-reqs.txt"
  log "$name: download $# wheels into $CACHE"
  "$PY" -m pip download -q --no-deps "${TARGET[@]}" -d "$CACHE" -r "$STAGE/$name-reqs.txt" \
    >"$STAGE/pip.log" 2>&1 || { cat "$STAGE/pip.log" >&2; echo "download failed" >&2; exit 1; }
  log "$name: install them into $dest"
  rm -rf "$dest"
  mkdir -p "$dest"
  "$PY" -m pip install -q --no-deps --no-index --no-compile --find-links "$CACHE" "${TARGET[@]}" \
    --target "$dest" -r "$STAGE/$name-reqs.txt" \
    >"$STAGE/pip.log" 2>&1 || { cat "$STAGE/pip.log" >&2; echo "install failed" >&2; exit 1; }
}

# Make a site folder independent of where it was built: no bytecode, neutral script shebangs.
neutralise() {
  find "$1" -name __pycache__ -type d -prune -exec rm -rf {} +
  if [ -d "$1/bin" ]; then sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$1"/bin/*; fi
}

# pack NAME SITE XZ_LEVEL [FIRST...]: a reproducible tar (fixed order, times and owners) of SITE,
# xz-compressed and split into pieces, plus checksums (first line: the unpacked tree). FIRST files
# go first in the tar, so that xz -9's 64 MiB window sees similar large binaries side by side.
pack() {
  local name=$1 site=$2 xzlevel=$3
  shift 3
  mkdir -p "$OUT_DIR"
  rm -f "$OUT_DIR/$name.tar.xz."*
  (
    cd "$site"
    printf './%s\n' "$@"
    find . -mindepth 1 | LC_ALL=C sort | grep -vxF -f <(printf './%s\n' "$@" ./.none)
  ) >"$STAGE/$name.list"
  log "$name: compress (xz $xzlevel) and split into $PIECE_MB MiB pieces under $OUT_DIR/"
  tar --no-recursion --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$site" -cf - -T "$STAGE/$name.list" |
    xz "$xzlevel" -T1 -c | split -b "${PIECE_MB}M" -d -a 2 - "$OUT_DIR/$name.tar.xz."
  (cd "$site" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum |
    sed 's/-$/unpacked-tree/') >"$OUT_DIR/$name.sha256"
  (cd "$OUT_DIR" && sha256sum "$name".tar.xz.*) >>"$OUT_DIR/$name.sha256"
}

build_sglang() {
  local s="$STAGE/sglang-site"
  install_site sglang "$s" "${SGLANG_REQS[@]}"
  log "sglang: repack for sm90"
  # sgl_kernel: FA3 (flash_ops, 1.1 GB) is only for the fa3 attention backend, sm100 is Blackwell,
  # infllm_ops and flashmla_ops are loaded lazily by their backends; sm90/common_ops is kept.
  rm -f "$s"/sgl_kernel/flash_ops*.so "$s"/sgl_kernel/infllm_ops*.so "$s"/sgl_kernel/flashmla_ops*.so
  rm -rf "$s"/sgl_kernel/sm100 "$s"/xgrammar/lib/libxgrammar.a
  # Debug sections only (no code): xgrammar and zstandard ship their extensions with DWARF.
  find "$s"/xgrammar "$s"/zstandard "$s"/wcwidth -name '*.so' -exec strip --strip-debug {} +
  neutralise "$s"
  # Same layout and compression as the sglang-site bundle documented for the H200 node.
  mkdir -p "$OUT_DIR"
  rm -f "$OUT_DIR"/sglang-site.tar.xz.*
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$s" -cf - . |
    xz -6 -T1 -c | split -b "${PIECE_MB}M" -d -a 2 - "$OUT_DIR/sglang-site.tar.xz."
  (cd "$s" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum |
    sed 's/-$/unpacked-tree/') >"$OUT_DIR/sglang-site.sha256"
  (cd "$OUT_DIR" && sha256sum sglang-site.tar.xz.*) >>"$OUT_DIR/sglang-site.sha256"
  write_sglang_unpack
}

# The bundles travel without bytecode (it would double them), and the GPU nodes set
# PYTHONDONTWRITEBYTECODE=1: without this each process of each launch compiled the tree from source
# again (SGLang's server and scheduler imported in 41.2 s so, 28.4 s with bytecode, on an H100 node).
# compileall writes it whatever that variable says, once per unpack; Python reads it either way.
write_sglang_unpack() {
  cat >"$OUT_DIR/sglang-unpack.sh" <<'EOF'
# source me: . .gpu/sglang-unpack.sh   (unpacks the SGLang bundle into /tmp/site, bytecode compiled)
_d=$(dirname "${BASH_SOURCE[0]}")
_sum=$(head -1 "$_d/sglang-site.sha256" | cut -c1-16)
if [ "$(cat /tmp/site/.bundle 2>/dev/null)" != "$_sum" ]; then
  rm -rf /tmp/site && mkdir -p /tmp/site &&
  cat "$_d"/sglang-site.tar.xz.[0-9][0-9] | xz -dc | tar -x -C /tmp/site || return 1
  # a node that sets PYTHONDONTWRITEBYTECODE would otherwise compile it in every process, every launch
  python3 -m compileall -q -j 0 /tmp/site > /dev/null 2>&1 || true
  echo "$_sum" >/tmp/site/.bundle || return 1
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
EOF
}

build_deps() {
  local s="$STAGE/ssweep-site"
  install_site deps "$s" "${DEPS_REQS[@]}"
  install_site protobuf "$s/_protobuf" "$PROTOBUF_REQ"
  log "deps: prune"
  # Java workers (33 MB of jars), RLlib, the dashboard UI's source maps and Plotly's JupyterLab
  # extension: never loaded here.
  rm -rf "$s"/ray/jars "$s"/ray/rllib "$s"/share/jupyter
  find "$s"/ray/dashboard -name '*.map' -type f -delete
  # Debug sections only (no code, symbols kept): SQLAlchemy's Cython modules carry 80% DWARF.
  find "$s" \( -name '*.so' -o -path '*/ray/core/src/ray/*' \) -type f -exec sh -c \
    'for f; do head -c4 "$f" | grep -q ELF && strip --strip-debug "$f"; done' sh {} +
  rm -rf "$s"/_protobuf/bin
  neutralise "$s"
  pack ssweep-site "$s" -9 ray/_raylet.so ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet
  write_deps_unpack
}

write_deps_unpack() {
  cat >"$OUT_DIR/ssweep-unpack.sh" <<'EOF'
# source me: . .gpu/ssweep-unpack.sh   (the orchestrator's dependencies, into /tmp/ssweep-site)
# Pieces may come in separate transfers to the same machine: each one seen is kept in
# /tmp/ssweep-pieces, and the tree is unpacked once every piece is there with the right checksum.
# Returns 3 while pieces are missing, 1 on a failed unpack, 0 when the site is ready; then
# PYTHONPATH holds /tmp/ssweep-site right after /tmp/site (the SGLang bundle) if that is there.
_d=$(dirname "${BASH_SOURCE[0]}")
_sum=$(head -1 "$_d/ssweep-site.sha256" | cut -c1-16)
if [ "$(cat /tmp/ssweep-site/.bundle 2>/dev/null)" != "$_sum" ]; then
  mkdir -p /tmp/ssweep-pieces
  for _p in "$_d"/ssweep-site.tar.xz.[0-9][0-9]; do
    [ -f "$_p" ] && cp -f "$_p" /tmp/ssweep-pieces/
  done
  _missing=""
  while read -r _h _n; do
    if [ "$(sha256sum "/tmp/ssweep-pieces/$_n" 2>/dev/null | cut -c1-64)" != "$_h" ]; then
      rm -f "/tmp/ssweep-pieces/$_n"
      _missing="$_missing $_n"
    fi
  done < <(tail -n +2 "$_d/ssweep-site.sha256")
  if [ -n "$_missing" ]; then
    echo "ssweep bundle: waiting for$_missing (carry them while this machine is warm)" >&2
    return 3
  fi
  rm -rf /tmp/ssweep-site /tmp/ssweep-site.new && mkdir -p /tmp/ssweep-site.new &&
    tail -n +2 "$_d/ssweep-site.sha256" | while read -r _h _n; do cat "/tmp/ssweep-pieces/$_n"; done |
    xz -dc | tar -x -C /tmp/ssweep-site.new || { echo "ssweep bundle: unpack failed" >&2; return 1; }
  # The node's protobuf is used unless it is too old for the generated modules carried here.
  python3 -c 'import google.protobuf as p, sys; sys.exit(tuple(map(int, p.__version__.split(".")[:3])) < (6, 33, 5))' \
    2>/dev/null || touch /tmp/ssweep-site.new/.use-bundled-protobuf
  mv /tmp/ssweep-site.new /tmp/ssweep-site && rm -rf /tmp/ssweep-pieces || return 1
  # a node that sets PYTHONDONTWRITEBYTECODE would otherwise compile it in every process, every launch
  python3 -m compileall -q -j 0 /tmp/ssweep-site > /dev/null 2>&1 || true
  echo "$_sum" >/tmp/ssweep-site/.bundle || return 1
fi
_s=/tmp/ssweep-site
[ -e /tmp/ssweep-site/.use-bundled-protobuf ] && _s=/tmp/ssweep-site:/tmp/ssweep-site/_protobuf
case ":${PYTHONPATH:-}:" in
  *:/tmp/ssweep-site:*) ;;
  *:/tmp/site:*) PYTHONPATH=$(echo ":$PYTHONPATH:" | sed "s|:/tmp/site:|:/tmp/site:$_s:|; s|^:||; s|:\$||") ;;
  *) PYTHONPATH=$_s${PYTHONPATH:+:$PYTHONPATH} ;;
esac
export PYTHONPATH PATH=/tmp/ssweep-site/bin:$PATH
unset _d _sum _p _h _n _missing _s
EOF
}

# How the pieces travel: each transfer holds the repo plus what it carries, 64 MiB in all. Files
# carried earlier stay on a machine that is still warm (and so does /tmp), so the calls must follow
# one another closely; the last one runs the real command after the prefix.
print_plan() {
  shopt -s nullglob
  local deps=("$OUT_DIR"/ssweep-site.tar.xz.[0-9][0-9]) sgl=("$OUT_DIR"/sglang-site.tar.xz.[0-9][0-9])
  local i n=0 total=$((${#deps[@]} + ${#sgl[@]})) keep
  keep="\"$OUT_DIR/ssweep-unpack.sh\", \"$OUT_DIR/ssweep-site.sha256\", \"$OUT_DIR/sglang-unpack.sh\", \"$OUT_DIR/sglang-site.sha256\""
  echo
  ls -l "$OUT_DIR"
  echo "Carry plan ($total calls, back to back; scripts and checksums are small, so every call takes them):"
  for ((i = 0; i < ${#deps[@]}; i++)); do
    n=$((n + 1))
    echo "  call $n carry: [\"${deps[i]}\", $keep]"
    [ "$n" -lt "$total" ] && echo "         command: . $OUT_DIR/ssweep-unpack.sh; echo ssweep-unpack rc=\$?"
  done
  for ((i = 0; i < ${#sgl[@]}; i++)); do
    n=$((n + 1))
    echo "  call $n carry: [\"${sgl[i]}\", $keep]"
    [ "$n" -lt "$total" ] && echo "         command: true"
  done
  [ ${#sgl[@]} -eq 0 ] && echo "  (the deps bundle takes pydantic, fastapi, uvicorn, starlette from the SGLang one)"
  echo "  prefix of call $n: . $OUT_DIR/sglang-unpack.sh || exit; . $OUT_DIR/ssweep-unpack.sh || exit;"
}

build_wheelhouse() {
  mkdir -p "$WHEELHOUSE"
  log "wheelhouse: build the project's wheel"
  "$PY" -m pip wheel -q --no-deps -w "$WHEELHOUSE" .
  local whl
  whl=$(ls -t "$WHEELHOUSE"/specsweep-*.whl | head -1)
  log "wheelhouse: download specsweep[gpu] and all its dependencies for the node (several GB)"
  # pip matches manylinux_2_N tags exactly, and torch's CUDA wheels (nccl, ...) use N up to 39.
  local target=(--only-binary=:all: --python-version 3.12 --implementation cp --platform any
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  for n in $(seq 5 39); do target+=(--platform "manylinux_2_${n}_x86_64"); done
  "$PY" -m pip download -q "${target[@]}" -d "$WHEELHOUSE" "specsweep[gpu] @ file://$(realpath "$whl")"
  cat >"$WHEELHOUSE/install.sh" <<'EOF'
#!/usr/bin/env bash
# Install specsweep with SGLang from the wheels beside this script; needs no network.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 -m pip install --no-index --find-links "$here" "specsweep[gpu]" "$@"
EOF
  chmod +x "$WHEELHOUSE/install.sh"
  log "wheelhouse: $(ls "$WHEELHOUSE" | wc -l) files, $(du -sh "$WHEELHOUSE" | cut -f1) in $WHEELHOUSE/"
}

case "$MODE" in
  all) check_ignored; build_sglang; build_deps; print_plan ;;
  sglang) check_ignored; build_sglang; print_plan ;;
  deps) check_ignored; build_deps; print_plan ;;
  wheelhouse) build_wheelhouse ;;
  piece-size) echo "$PIECE_MB" ;;
  scripts) mkdir -p "$OUT_DIR"; write_sglang_unpack; write_deps_unpack ;;
  *) echo "usage: $0 [all|sglang|deps|wheelhouse|piece-size|scripts]" >&2; exit 2 ;;
esac
