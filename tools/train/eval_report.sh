#!/bin/bash
# Every figure of docs/models.md (pagoda-tiny) and docs/quantization.md (KV formats on
# pagoda-tiny): runs `pagoda eval` and appends one line per run to OUT:
#   <model>\t<what>\t<the exact command>\t<its --json output, or its error>
# Usage: tools/train/eval_report.sh PAGODA_BINARY OUT [gqa|mla|both] [stage...]
# stages: retrieval (bf16 at 1K/2K/4K), formats (retrieval at 2K per KV format), policies
# (mixed precision at 2K), kl (KL and perplexity per format and policy), ppl (bf16 perplexity)
set -uo pipefail
B=$1; OUT=$2; WHICH=${3:-both}; shift 3 || shift $#
STAGES=${*:-retrieval formats policies kl ppl}
C=${PAGODA_FIXTURES:-../shared/fixtures}/corpora
declare -A M=([gqa]=models/pagoda-tiny.gguf [mla]=models/pagoda-tiny-mla)
models=(gqa mla); [ "$WHICH" != both ] && models=("$WHICH")
POLICIES=("--kv-cache-dtype-skip-layers 0" "--kv-sink-tokens 16" "--kv-recent-tokens 16" "--kv-heavy-tokens 2")

one() {  # model label args...
  local m=$1 what=$2; shift 2
  local cmd="pagoda eval $* --json"
  local out
  out=$("$B" eval "$@" --json 2>/tmp/eval_report.err) || out="ERROR: $(grep -v '^\[eval' /tmp/eval_report.err | tail -n 1)"
  printf '%s\t%s\t%s\t%s\n' "$m" "$what" "$cmd" "$out" | tee -a "$OUT"
}

for m in "${models[@]}"; do
  mod=${M[$m]}
  for s in $STAGES; do
    case $s in
      retrieval)
        for ctx in 1024 2048 4088; do
          one $m "retrieval bf16 $ctx" retrieval --model $mod --context $ctx --trials 24
        done ;;
      formats)
        for d in fp8 int8 int4 nvfp4 kivi2; do
          one $m "retrieval $d 2048" retrieval --model $mod --context 2048 --trials 24 --kv-cache-dtype $d
        done ;;
      policies)
        for d in int4 nvfp4 kivi2; do
          for p in "${POLICIES[@]}"; do
            one $m "retrieval $d $p 2048" retrieval --model $mod --context 2048 --trials 24 --kv-cache-dtype $d $p
          done
        done ;;
      kl)
        for d in fp8 int8 int4 nvfp4 kivi2; do
          one $m "kl $d" kl --model $mod --data $C/tinystories-first2MiB.txt --max-tokens 4096 --max-model-len 1024 --kv-cache-dtype $d
        done
        for d in int4 kivi2; do
          for p in "${POLICIES[@]}"; do
            one $m "kl $d $p" kl --model $mod --data $C/tinystories-first2MiB.txt --max-tokens 4096 --max-model-len 1024 --kv-cache-dtype $d $p
          done
        done ;;
      ppl)
        one $m "ppl held-out bf16" perplexity --model $mod --data $C/tinystories-first2MiB.txt --max-tokens 4096 --max-model-len 1024
        one $m "ppl trained-on bf16" perplexity --model $mod --data $C/tinyshakespeare.txt --max-tokens 4096 --max-model-len 1024 ;;
    esac
  done
done
