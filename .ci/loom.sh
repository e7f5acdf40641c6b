#!/usr/bin/env bash
# The loom part of keel's CI (see loom-tests/README.md).
#
# 1. The models must pass: RUSTFLAGS="--cfg keel_loom", exhaustive within
#    LOOM_MAX_PREEMPTIONS=3.
# 2. Every broken twin (the real src/sync code with one fault compiled in by
#    --cfg keel_loom_broken="NAME") runs as its own process and must FAIL,
#    with the failure its model is meant to report. A twin that builds but
#    passes, or that does not build, fails CI.
#
# Each RUSTFLAGS set gets its own CARGO_TARGET_DIR so no run rebuilds
# another's artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export CARGO_TERM_COLOR=never
target_root="${CARGO_TARGET_DIR:-target}"
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start ))s"; }

echo "==> loom models (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
RUSTFLAGS="--cfg keel_loom" CARGO_TARGET_DIR="$target_root/loom" \
  cargo test -p loom-tests --release
echo "==> loom models passed ($(elapsed))"

# twin name | model (--test) | expected failure (extended regex)
twins=(
  "overtake|gate_quiesce|overtook the quiescer"
  "lost_wakeup|gate_quiesce|deadlock"
  "no_drain|commit_readers|half-committed deployment|does not resolve"
  "wake_one|resume_wakes_all|deadlock"
  "double_quiesce|back_to_back|migrations overlap"
  "no_register|async_face|deadlock"
  "late_reserve|submit_then_quiesce|admitted chain not yet run"
)

bad=0
for entry in "${twins[@]}"; do
  IFS='|' read -r name test expect <<<"$entry"
  flags="--cfg keel_loom --cfg keel_loom_broken=\"$name\""
  dir="$target_root/loom-broken-$name"
  echo "==> broken twin '$name' (model $test)"
  if ! RUSTFLAGS="$flags" CARGO_TARGET_DIR="$dir" \
      cargo test -q -p loom-tests --release --test "$test" --no-run; then
    echo "FAIL: twin '$name' does not build"
    bad=1
    continue
  fi
  log="$dir/twin-$name.log"
  set +e
  RUSTFLAGS="$flags" CARGO_TARGET_DIR="$dir" \
    cargo test -q -p loom-tests --release --test "$test" >"$log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    echo "FAIL: twin '$name' PASSED its model '$test' (loom did not catch the fault)"
    bad=1
  elif grep -Eq "$expect" "$log"; then
    reason=$(grep -Eo "$expect" "$log" | head -n1)
    echo "ok: twin '$name' failed as expected (exit $rc: $reason) ($(elapsed))"
  else
    echo "FAIL: twin '$name' failed (exit $rc) without the expected report /$expect/:"
    tail -n 30 "$log"
    bad=1
  fi
done

if [ "$bad" -ne 0 ]; then
  echo "==> loom: some broken twin was not caught ($(elapsed))"
  exit 1
fi
echo "==> loom: models pass, every broken twin fails ($(elapsed))"
